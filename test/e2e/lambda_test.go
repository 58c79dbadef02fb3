package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/chargeonce/chargeonce/internal/awsenv"
	"github.com/chargeonce/chargeonce/internal/testkit"
)

// rieModule is the Lambda Runtime Interface Emulator, pinned.
const rieModule = "github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie@v0.0.0-20261030222936-bef5c4ba774d"

// functions are the template's functions: package directory and timeout.
var functions = map[string]time.Duration{"charge": 10 * time.Second, "sweeper": 50 * time.Second, "reconcile": 30 * time.Second, "intake": 30 * time.Second, "audit": 60 * time.Second}

// goTool finds the go command; the test cannot run without it.
func goTool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("e2e needs the go command to build the functions and the emulator: %v", err)
	}
	return path
}

func runGo(t *testing.T, env []string, args ...string) {
	t.Helper()
	cmd := exec.Command(goTool(t), args...)
	cmd.Dir = testkit.RepoRoot()
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// buildBootstraps builds every function as the Makefile does for Lambda,
// for this machine's architecture, and returns each bootstrap's path.
func buildBootstraps(t *testing.T) map[string]string {
	t.Helper()
	out := t.TempDir()
	args := []string{"build", "-tags", "lambda.norpc", "-trimpath", "-ldflags", "-s -w", "-o", out + string(filepath.Separator)}
	for name := range functions {
		args = append(args, "./functions/"+name)
	}
	runGo(t, []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=" + runtime.GOARCH}, args...)
	paths := map[string]string{}
	for name := range functions {
		dir := filepath.Join(out, name+".d")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		paths[name] = filepath.Join(dir, "bootstrap")
		if err := os.Rename(filepath.Join(out, name), paths[name]); err != nil {
			t.Fatal(err)
		}
	}
	return paths
}

// installRIE installs the pinned emulator into bin/tools.
func installRIE(t *testing.T) string {
	t.Helper()
	gobin := filepath.Join(testkit.RepoRoot(), "bin", "tools")
	runGo(t, []string{"GOBIN=" + gobin}, "install", rieModule)
	return filepath.Join(gobin, "aws-lambda-rie")
}

// function is one function running under its own emulator.
type function struct {
	name   string
	url    string
	output *testkit.LogBuffer
}

// startFunction runs bootstrap under the emulator with env, on two free
// loopback ports of its own (the invoke API and the runtime API), so the
// functions run side by side.
func startFunction(t *testing.T, rie, name, bootstrap string, env map[string]string) *function {
	t.Helper()
	invokeAddr, runtimeAddr := freeAddr(t), freeAddr(t)
	cmd := exec.Command(rie, "--log-level", "info",
		"--runtime-interface-emulator-address", invokeAddr, "--runtime-api-address", runtimeAddr, bootstrap)
	cmd.Dir = filepath.Dir(bootstrap)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out := &testkit.LogBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // the function runs in its group
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s under the runtime interface emulator: %v", name, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
		if t.Failed() {
			t.Logf("%s emulator output:\n%s", name, out.String())
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", invokeAddr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			break
		}
		select {
		case <-exited:
			t.Fatalf("%s emulator exited:\n%s", name, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s emulator not listening on %s:\n%s", name, invokeAddr, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return &function{name: name, url: "http://" + invokeAddr + "/2015-03-31/functions/function/invocations", output: out}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	var lc net.ListenConfig
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// invoke sends payload as the function's event and decodes its result
// into out (unless nil).
func (f *function) invoke(t *testing.T, payload []byte, out any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := f.call(ctx, payload, out); err != nil {
		t.Fatal(err)
	}
}

// call is invoke for any goroutine: it returns what went wrong.
func (f *function) call(ctx context.Context, payload []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.url, bytes.NewReader(payload))
	if err != nil {
		return err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("invoke %s: %w", f.name, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return err
	}
	var fnErr struct {
		ErrorMessage string `json:"errorMessage"`
		ErrorType    string `json:"errorType"`
	}
	if res.StatusCode != http.StatusOK || json.Unmarshal(body, &fnErr) == nil && fnErr.ErrorType != "" {
		return fmt.Errorf("invoke %s: %d %s", f.name, res.StatusCode, body)
	}
	if out != nil {
		if err := json.Unmarshal(body, out); err != nil {
			return fmt.Errorf("invoke %s: result %s: %w", f.name, body, err)
		}
	}
	return nil
}

var (
	reportInit = regexp.MustCompile(`REPORT RequestId: \S+\s+Init Duration: ([0-9.]+) ms`)
	// firstDuration is the Duration of the REPORT line that has an Init
	// Duration: the first invocation's.
	firstDuration = regexp.MustCompile(`REPORT RequestId: \S+\s+Init Duration: [0-9.]+ ms\s+Duration: ([0-9.]+) ms`)
	rapidInit     = regexp.MustCompile(`INIT REPORT\(durationMs: ([0-9.]+)\)`)
)

// initDurations are the emulator's two accounts of the cold start: the
// Init Duration of its REPORT line (it times only the start of the init
// call, so it is tiny) and its INIT REPORT (start of the bootstrap to the
// runtime's first request for work).
func (f *function) initDurations(t *testing.T) (report, runtimeInit string) {
	t.Helper()
	for range 40 { // the REPORT line is printed as the response is sent
		out := f.output.String()
		r, i := reportInit.FindStringSubmatch(out), rapidInit.FindStringSubmatch(out)
		if r != nil && i != nil {
			return r[1] + " ms", i[1] + " ms"
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Errorf("%s: no REPORT line with Init Duration or INIT REPORT in the emulator output:\n%s", f.name, f.output.String())
	return "unknown", "unknown"
}

// firstRequest is the emulator's Duration of the function's first
// invocation, the one after its cold start.
func (f *function) firstRequest() string {
	if m := firstDuration.FindStringSubmatch(f.output.String()); m != nil {
		return m[1] + " ms"
	}
	return "unknown"
}

// readEvent reads events/<name>.json.
func readEvent(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testkit.RepoRoot(), "events", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// awsEnv is the AWS part of the functions' environment: the test's
// endpoints, and dummy credentials for an emulator the test started, or
// else the caller's region and credentials, resolved from their chain (a
// profile included) and passed as Lambda passes a role's.
func awsEnv(t *testing.T) map[string]string {
	t.Helper()
	ep := testkit.Endpoints(t)
	env := map[string]string{
		awsenv.EnvDynamoDBEndpoint: ep.DynamoDB, awsenv.EnvSQSEndpoint: ep.SQS, awsenv.EnvSecretsManagerEndpoint: ep.SecretsManager,
		awsenv.EnvS3Endpoint: ep.S3, "AWS_REGION": awsenv.DefaultRegion,
	}
	if awsenv.EndpointsFrom(os.Getenv) != ep {
		env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"] = "test", "test"
		return env
	}
	cfg, err := awsenv.Config(t.Context(), false)
	if err != nil {
		t.Fatal(err)
	}
	creds, err := cfg.Credentials.Retrieve(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	env["AWS_REGION"] = cfg.Region
	env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"], env["AWS_SESSION_TOKEN"] = creds.AccessKeyID, creds.SecretAccessKey, creds.SessionToken
	return env
}

// receive waits for one message on the queue at url.
func receive(t *testing.T, client *sqs.Client, url string) sqstypes.Message {
	t.Helper()
	for range 5 {
		out, err := client.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: 1, WaitTimeSeconds: 2,
			MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameAll},
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Messages) == 1 {
			return out.Messages[0]
		}
	}
	t.Fatal("no message on the reconcile queue")
	return sqstypes.Message{}
}

func fileSize(t *testing.T, path string) string {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%.1f MiB (%d bytes)", float64(fi.Size())/(1<<20), fi.Size())
}
