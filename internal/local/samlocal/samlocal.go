// Package samlocal runs what `sam local invoke` and `sam local start-api`
// need besides SAM CLI and Docker. It runs the DynamoDB/SQS/Secrets
// Manager/S3 emulator and the provider simulator. They listen on the docker
// bridge's address, where the function containers reach them: SAM CLI
// ignores --docker-network host. It creates the template's tables and
// queues on the emulator, and the provider's API key as a secret. It writes
// a SAM CLI configuration file that points both commands at them.
//
// SAM CLI hands a container only the variables the template declares. So
// the configuration passes the emulator as the template's LocalEndpointUrl
// parameter. That sets DYNAMODB_ENDPOINT, SQS_ENDPOINT,
// SECRETSMANAGER_ENDPOINT and S3_ENDPOINT. It passes the secret's name as
// ProviderSecretName. The functions read its value from the emulator, as
// deployed from AWS. The tables' and queues' names go in an --env-vars
// file, over the variables that name them. It sets
// ApiAuthorizer=sam-local-dev, since SAM CLI does not emulate JWT
// authorizers. `make sam-local` (cmd/samlocal) and the SAM test (test/sam)
// both start it.
package samlocal

import (
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/chargeonce/chargeonce/internal/app"
	"github.com/chargeonce/chargeonce/internal/audit"
	"github.com/chargeonce/chargeonce/internal/awsenv"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/limit"
	"github.com/chargeonce/chargeonce/internal/local/emulator"
	"github.com/chargeonce/chargeonce/internal/local/provision"
	"github.com/chargeonce/chargeonce/internal/provider/providersim"
	"github.com/chargeonce/chargeonce/internal/queue"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// The architectures of the template's LambdaArchitecture parameter, and
// the GOARCH each is built with.
const (
	ArchARM64 = "arm64"
	ArchX8664 = "x86_64"
)

// GOARCH is the Go architecture for the Lambda architecture arch. It is ""
// for an unknown one.
func GOARCH(arch string) string {
	return map[string]string{ArchARM64: "arm64", ArchX8664: "amd64"}[arch]
}

// Names of the tables, queues, and audit bucket and index on the emulator.
// They are those of `make run`.
const (
	IdempotencyTable    = "chargeonce-idempotency"
	ChargesTable        = "chargeonce-charges"
	LimitsTable         = "chargeonce-limits"
	ReconcileQueue      = "chargeonce-reconcile"
	ChargeRequestsQueue = "chargeonce-charge-requests"
	AuditBucket         = "chargeonce-audit"
	AuditIndexTable     = "chargeonce-audit-index"
)

// ProviderKey is the provider simulator's key. The functions read it from
// the secret ProviderSecret names. The template takes that name as
// ProviderSecretName.
const (
	ProviderKey    = "sk_sam_local"
	ProviderSecret = "chargeonce/provider-api-key"
)

// TenantClaim is the template's TenantClaim default. The development
// authorizer returns the tenant under it.
const TenantClaim = "tenant_id"

// Env is the environment SAM CLI runs in here, as NAME=value. It holds the
// dummy credentials the emulator takes. SAM CLI hands its own credentials
// and region to the containers. It also stops lookups of an AWS account
// that cannot answer. SAM CLI asks STS for the account id before every
// invoke. Without a network, that costs 8 s of retries before it falls back
// to 123456789012.
var Env = []string{
	"AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test", "AWS_REGION=" + awsenv.DefaultRegion,
	"AWS_EC2_METADATA_DISABLED=true", "AWS_ENDPOINT_URL_STS=http://127.0.0.1:9", "AWS_MAX_ATTEMPTS=1",
	"SAM_CLI_TELEMETRY=0",
}

// BridgeAddress is the IPv4 address of docker0, Docker's default bridge.
// The containers reach the host through it.
func BridgeAddress() (string, error) {
	const name = "docker0"
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		return "", fmt.Errorf("samlocal: no %s (is the Docker daemon running? scripts/sam-docker.sh starts one): %w", name, err)
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		return "", fmt.Errorf("samlocal: addresses of %s: %w", name, err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
			return n.IP.String(), nil
		}
	}
	return "", fmt.Errorf("samlocal: %s has no IPv4 address", name)
}

// Options configure Start.
type Options struct {
	// Root is the repository root (it holds .venv and template.yaml).
	Root string
	// Host is the address to listen on, one the containers reach.
	Host string
	// EmulatorPort and ProviderPort: 0 picks free ports.
	EmulatorPort, ProviderPort int
	// Arch is the functions' LambdaArchitecture: ArchARM64 or ArchX8664.
	Arch string
	// Logger receives the provider simulator's lines. Default: discard.
	Logger *slog.Logger
}

// Stack is a running emulator and provider simulator with the template's
// tables and queues.
type Stack struct {
	EmulatorURL, ProviderURL string
	// Sim is the provider simulator, whose ledger counts the charges.
	Sim *providersim.Simulator
	// Clients reach the emulator, configured by cfg.
	Clients awsenv.Clients
	cfg     aws.Config
	// Reconcile and ChargeRequests are the two queues and their DLQs.
	Reconcile, ChargeRequests queue.Queues
	arch                      string
	emu                       *emulator.Emulator
	srv                       *http.Server
	served                    chan error
}

// Start starts the stack. Close stops it.
func Start(ctx context.Context, o Options) (s *Stack, err error) {
	if GOARCH(o.Arch) == "" {
		return nil, fmt.Errorf("samlocal: architecture %q: want %s or %s", o.Arch, ArchARM64, ArchX8664)
	}
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	emu, err := emulator.StartOn(o.Root, o.Host, o.EmulatorPort)
	if err != nil {
		return nil, fmt.Errorf("samlocal: %w", err)
	}
	s = &Stack{EmulatorURL: emu.URL(), arch: o.Arch, emu: emu}
	defer func() {
		if err != nil {
			_ = s.Close()
		}
	}()
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort(o.Host, strconv.Itoa(o.ProviderPort)))
	if err != nil {
		return s, fmt.Errorf("samlocal: provider simulator: %w", err)
	}
	s.ProviderURL = "http://" + ln.Addr().String()
	s.Sim = providersim.New(providersim.WithSecret(ProviderKey), providersim.WithLogger(logger))
	s.srv = &http.Server{Handler: s.Sim, ReadHeaderTimeout: 10 * time.Second}
	s.served = make(chan error, 1)
	go func() { s.served <- s.srv.Serve(ln) }()

	cfg, err := awsenv.Config(ctx, true)
	if err != nil {
		return s, err
	}
	s.Clients, s.cfg = awsenv.New(cfg, awsenv.Emulator(s.EmulatorURL)), cfg
	if err := s.createResources(ctx); err != nil {
		return s, err
	}
	return s, nil
}

// createResources creates what `make run` does, from the definitions the
// template is checked against. That is the tables, the idempotency table's
// TTL, the queues, and the audit trail's bucket and index. The provider's
// API key becomes a secret.
func (s *Stack) createResources(ctx context.Context) error {
	if _, err := s.Clients.SecretsManager.CreateSecret(ctx, &secretsmanager.CreateSecretInput{
		Name: aws.String(ProviderSecret), SecretString: aws.String(ProviderKey),
	}); err != nil {
		return fmt.Errorf("samlocal: secret %s: %w", ProviderSecret, err)
	}
	if _, err := provision.CreateTable(ctx, s.Clients.DynamoDB, dynamostore.TableInput(IdempotencyTable)); err != nil {
		return fmt.Errorf("samlocal: %w", err)
	}
	if _, err := s.Clients.DynamoDB.UpdateTimeToLive(ctx, dynamostore.TTLInput(IdempotencyTable)); err != nil {
		return fmt.Errorf("samlocal: ttl on %s: %w", IdempotencyTable, err)
	}
	if _, err := provision.CreateTable(ctx, s.Clients.DynamoDB, charge.TableInput(ChargesTable)); err != nil {
		return fmt.Errorf("samlocal: %w", err)
	}
	if _, err := provision.CreateTable(ctx, s.Clients.DynamoDB, limit.TableInput(LimitsTable)); err != nil {
		return fmt.Errorf("samlocal: %w", err)
	}
	var err error
	if s.Reconcile, err = queue.Create(ctx, s.Clients.SQS, ReconcileQueue); err != nil {
		return fmt.Errorf("samlocal: %w", err)
	}
	if s.ChargeRequests, err = queue.Create(ctx, s.Clients.SQS, ChargeRequestsQueue); err != nil {
		return fmt.Errorf("samlocal: %w", err)
	}
	store := awsenv.S3(s.cfg, s.EmulatorURL)
	if err := provision.CreateBucket(ctx, store, audit.BucketInput(AuditBucket), audit.LockInput(AuditBucket, audit.DefaultRetentionDays)); err != nil {
		return fmt.Errorf("samlocal: %w", err)
	}
	if _, err := provision.CreateTable(ctx, s.Clients.DynamoDB, audit.IndexTableInput(AuditIndexTable)); err != nil {
		return fmt.Errorf("samlocal: %w", err)
	}
	return nil
}

// Close stops the provider simulator and the emulator.
func (s *Stack) Close() error {
	var errs []error
	if s.srv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		errs = append(errs, s.srv.Shutdown(sctx))
	}
	errs = append(errs, s.emu.Stop())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("samlocal: %w", err)
	}
	return nil
}

// Exited is closed when the emulator exits. It receives the provider
// simulator's error when it stops serving. Either ends the stack.
func (s *Stack) Exited() (<-chan struct{}, <-chan error) { return s.emu.Exited(), s.served }

// ParameterOverrides are the template parameters the local commands take,
// as Key=Value.
func (s *Stack) ParameterOverrides() []string {
	return []string{
		"JwtIssuer=https://issuer.invalid/", "JwtAudience=chargeonce-local",
		"ProviderUrl=" + s.ProviderURL, "ProviderSecretName=" + ProviderSecret,
		"ApiAuthorizer=sam-local-dev", "LambdaArchitecture=" + s.arch, "LocalEndpointUrl=" + s.EmulatorURL,
	}
}

// EnvVars is the --env-vars file's content. It names the tables and queues
// for every function that declares them. SAM's local Ref of a resource is
// its logical id.
func (s *Stack) EnvVars() map[string]map[string]string {
	return map[string]map[string]string{"Parameters": {
		app.EnvIdempotencyTable:     IdempotencyTable,
		app.EnvChargesTable:         ChargesTable,
		app.EnvLimitsTable:          LimitsTable,
		app.EnvReconcileQueueURL:    s.Reconcile.URL,
		app.EnvChargeRequestsDLQURL: s.ChargeRequests.DLQURL,
		app.EnvAuditBucket:          AuditBucket,
		app.EnvAuditIndexTable:      AuditIndexTable,
	}}
}

// Config is a SAM CLI configuration file for `sam local invoke` and `sam
// local start-api`.
type Config struct {
	// Path is the samconfig.toml to pass as --config-file.
	Path string
	// EnvVars is the env-vars file it names.
	EnvVars string
}

// WriteConfig writes the configuration into dir. template is a built
// template (empty: SAM's default, .aws-sam/build/template.yaml). host:port
// is the start-api address.
func (s *Stack) WriteConfig(dir, template, apiHost string, apiPort int) (Config, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Config{}, fmt.Errorf("samlocal: %w", err)
	}
	c := Config{Path: filepath.Join(dir, "samconfig.toml"), EnvVars: filepath.Join(dir, "env.json")}
	ev, err := json.MarshalIndent(s.EnvVars(), "", "  ")
	if err != nil {
		return Config{}, fmt.Errorf("samlocal: %w", err)
	}
	if err := os.WriteFile(c.EnvVars, append(ev, '\n'), 0o644); err != nil {
		return Config{}, fmt.Errorf("samlocal: %w", err)
	}
	var b strings.Builder
	b.WriteString("# Written by samlocal for this run of `make sam-local` or the SAM test:\n# its addresses change from one run to the next.\nversion = 0.1\n")
	common := func(section string) {
		fmt.Fprintf(&b, "\n[default.%s.parameters]\n", section)
		fmt.Fprintf(&b, "parameter_overrides = %s\n", tomlList(s.ParameterOverrides()))
		fmt.Fprintf(&b, "env_vars = %s\n", strconv.Quote(c.EnvVars))
		// The base image is present (the real one or the stand-in). A pull
		// would fail where no registry is reachable.
		b.WriteString("skip_pull_image = true\n")
		if GOARCH(s.arch) != runtime.GOARCH {
			// qemu's own memory (its translated code) counts against the
			// container's limit. Under it, a 256 MB function was killed.
			b.WriteString("no_memory_limit = true\n")
		}
		if template != "" {
			fmt.Fprintf(&b, "template_file = %s\n", strconv.Quote(template))
		}
	}
	common("local_invoke")
	common("local_start_api")
	fmt.Fprintf(&b, "host = %s\nport = %d\n", strconv.Quote(apiHost), apiPort)
	// One container per function, started on its first request and kept. A
	// cold start per request is seconds under qemu.
	b.WriteString("warm_containers = \"LAZY\"\n")
	if err := os.WriteFile(c.Path, []byte(b.String()), 0o644); err != nil {
		return Config{}, fmt.Errorf("samlocal: %w", err)
	}
	return c, nil
}

func tomlList(items []string) string {
	q := make([]string, len(items))
	for i, v := range items {
		q[i] = strconv.Quote(v)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// SAM is the project's pinned SAM CLI, in Env.
func SAM(root string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(root, ".venv", "bin", "sam"), args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), Env...)
	return cmd
}

// Build runs `sam build` for arch into buildDir (empty: SAM's default,
// .aws-sam/build). The Makefile's build hooks build for the matching
// GOARCH. Build then checks that every bootstrap is an ELF file for arch.
// SAM CLI passes its hooks no architecture. With qemu's binfmt handler
// registered, a mismatch would run anyway, emulated.
func Build(root, arch, buildDir string, out io.Writer) error {
	goarch := GOARCH(arch)
	if goarch == "" {
		return fmt.Errorf("samlocal: architecture %q: want %s or %s", arch, ArchARM64, ArchX8664)
	}
	args := []string{"build", "--parameter-overrides", "ApiAuthorizer=sam-local-dev LambdaArchitecture=" + arch}
	if buildDir != "" {
		args = append(args, "--build-dir", buildDir)
	} else {
		buildDir = filepath.Join(root, ".aws-sam", "build")
	}
	cmd := SAM(root, args...)
	cmd.Env = append(cmd.Env, "GOARCH="+goarch)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("samlocal: sam build: %w", err)
	}
	return CheckArch(buildDir, arch)
}

// CheckArch checks that every <function>/bootstrap under buildDir is built
// for arch.
func CheckArch(buildDir, arch string) error {
	want := map[string]elf.Machine{ArchARM64: elf.EM_AARCH64, ArchX8664: elf.EM_X86_64}[arch]
	paths, err := filepath.Glob(filepath.Join(buildDir, "*", "bootstrap"))
	if err != nil || len(paths) == 0 {
		return fmt.Errorf("samlocal: no bootstrap under %s (%v)", buildDir, err)
	}
	slices.Sort(paths)
	for _, p := range paths {
		f, err := elf.Open(p)
		if err != nil {
			return fmt.Errorf("samlocal: %w", err)
		}
		m := f.Machine
		f.Close()
		if m != want {
			return fmt.Errorf("samlocal: %s is built for %s, not %s (build with GOARCH=%s)", p, m, arch, GOARCH(arch))
		}
	}
	return nil
}
