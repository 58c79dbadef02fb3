package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"gopkg.in/yaml.v3"

	"github.com/chargeonce/chargeonce/internal/app"
	"github.com/chargeonce/chargeonce/internal/audit"
	"github.com/chargeonce/chargeonce/internal/awsenv"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/charge/httpapi"
	"github.com/chargeonce/chargeonce/internal/devauth"
	"github.com/chargeonce/chargeonce/internal/intake"
	"github.com/chargeonce/chargeonce/internal/limit"
	"github.com/chargeonce/chargeonce/internal/metrics"
	"github.com/chargeonce/chargeonce/internal/queue"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// Logical IDs in template.yaml.
const (
	idempotencyTable = "IdempotencyTable"
	chargesTable     = "ChargesTable"
	limitsTable      = "LimitsTable"
	reconcileQueue   = "ReconcileQueue"
	deadLetterQueue  = "ReconcileDeadLetterQueue"
	reconcileFn      = "ReconcileFunction"
	intakeQueue      = "ChargeRequestsQueue"
	intakeDLQ        = "ChargeRequestsDeadLetterQueue"
	intakeFn         = "IntakeFunction"
	devAuthFn        = "DevAuthorizerFunction"
	auditFn          = "AuditFunction"
	auditBucket      = "AuditBucket"
	auditIndex       = "AuditIndexTable"
	auditDLQ         = "AuditDeadLetterQueue"
)

// code is the side of the code the template is checked against.
type code struct {
	idempotencyTable, chargesTable, limitsTable *dynamodb.CreateTableInput
	ttl, limitsTTL                              *dynamodb.UpdateTimeToLiveInput
	// The audit trail's: its index, the tables' streams, the bucket's
	// lock and its default retention, the index's default and longest in
	// days.
	auditIndexTTL                          *dynamodb.UpdateTimeToLiveInput
	auditIndexTable                        *dynamodb.CreateTableInput
	stream                                 *dynamodb.UpdateTableInput
	lock                                   *s3.PutObjectLockConfigurationInput
	retentionDays, indexDays, indexMaxDays int
	// loaders are the configuration loaders of the template's functions.
	loaders map[string]func(app.Getenv)
	// unread are the Globals' variables a function is known to leave
	// unread, by function.
	unread map[string][]string
	// metrics, operations and outcomes are what the code emits (package
	// metrics).
	metrics    []metrics.Definition
	operations map[string][]metrics.Operation
	outcomes   map[string][]metrics.Outcome
	// routes are the charge function's route keys; public those of them
	// served without the JWT authorizer, deferrable those that can wait.
	routes, public, deferrable []string
	// secretNames are the variables that name a secret the function
	// reads.
	secretNames []string
	// built is what each function's code builds (reach), or why it could
	// not be read.
	built    built
	builtErr error
}

func currentCode() code {
	b, err := reachedCode()
	return code{
		built:            b,
		builtErr:         err,
		idempotencyTable: dynamostore.TableInput("t"),
		chargesTable:     charge.TableInput("t"),
		ttl:              dynamostore.TTLInput("t"),
		limitsTable:      limit.TableInput("t"),
		limitsTTL:        limit.TTLInput("t"),
		auditIndexTable:  audit.IndexTableInput("t"),
		auditIndexTTL:    audit.IndexTTLInput("t"),
		stream:           audit.StreamInput("t"),
		lock:             audit.LockInput("b", audit.DefaultRetentionDays),
		retentionDays:    audit.DefaultRetentionDays,
		indexDays:        int(audit.DefaultIndexRetention / (24 * time.Hour)),
		indexMaxDays:     int(audit.MaxIndexRetention / (24 * time.Hour)),
		loaders: map[string]func(app.Getenv){
			"ChargeFunction":    func(g app.Getenv) { _, _ = app.LoadCharge(g); endpoints(g) },
			"SweeperFunction":   func(g app.Getenv) { _, _ = app.LoadSweeper(g); endpoints(g) },
			"ReconcileFunction": func(g app.Getenv) { _, _ = app.LoadReconcile(g); endpoints(g) },
			"IntakeFunction":    func(g app.Getenv) { _, _ = app.LoadIntake(g); endpoints(g) },
			auditFn:             func(g app.Getenv) { _, _ = app.LoadAudit(g); endpoints(g) },
			devAuthFn:           func(g app.Getenv) { devauth.Load(g) },
		},
		// It builds no AWS client and traces nothing.
		unread: map[string][]string{devAuthFn: {
			app.EnvTraceEndpoint, awsenv.EnvDynamoDBEndpoint, awsenv.EnvSQSEndpoint, awsenv.EnvSecretsManagerEndpoint, awsenv.EnvS3Endpoint,
			app.EnvRoutesTable, app.EnvLedgerTable, app.EnvHomeRegion, app.EnvTenantHomes,
		}},
		metrics:     metrics.Definitions(),
		routes:      httpapi.Routes,
		secretNames: []string{app.EnvProviderSecretName, app.EnvWebhookSecretName},
		public:      []string{httpapi.RouteWebhook},
		deferrable:  httpapi.Deferrable,
		operations: map[string][]metrics.Operation{
			metrics.FunctionCharge:    metrics.Operations(metrics.FunctionCharge),
			metrics.FunctionReconcile: metrics.Operations(metrics.FunctionReconcile),
			metrics.FunctionSweeper:   metrics.Operations(metrics.FunctionSweeper),
			metrics.FunctionIntake:    metrics.Operations(metrics.FunctionIntake),
		},
		outcomes: map[string][]metrics.Outcome{
			metrics.FunctionCharge:    metrics.Outcomes(metrics.FunctionCharge),
			metrics.FunctionReconcile: metrics.Outcomes(metrics.FunctionReconcile),
			metrics.FunctionSweeper:   metrics.Outcomes(metrics.FunctionSweeper),
			metrics.FunctionIntake:    metrics.Outcomes(metrics.FunctionIntake),
		},
	}
}

// endpoints reads what awsenv.FromLambdaEnv reads: every function but the
// development authorizer builds its clients with it.
func endpoints(g app.Getenv) { awsenv.FromLambdaEnv(g) }

func readTemplate(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testkit.RepoRoot(), "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestTemplateMatchesCode(t *testing.T) {
	t.Parallel()
	problems, err := check(readTemplate(t), currentCode())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// TestCheckCatchesCodeDrift changes the code's side one way at a time and
// expects the check to notice each change.
func TestCheckCatchesCodeDrift(t *testing.T) {
	t.Parallel()
	tmpl := readTemplate(t)
	tests := map[string]func(*code){
		"new table attribute": func(k *code) {
			k.idempotencyTable.AttributeDefinitions = append(k.idempotencyTable.AttributeDefinitions,
				ddbtypes.AttributeDefinition{AttributeName: aws.String("x"), AttributeType: ddbtypes.ScalarAttributeTypeS})
		},
		"index dropped":   func(k *code) { k.idempotencyTable.GlobalSecondaryIndexes = nil },
		"charges key":     func(k *code) { k.chargesTable.KeySchema = k.chargesTable.KeySchema[:1] },
		"limits key":      func(k *code) { k.limitsTable.KeySchema = k.limitsTable.KeySchema[:1] },
		"create deferred": func(k *code) { k.deferrable = append(slices.Clone(k.deferrable), httpapi.RouteCreate) },
		"limits ttl":      func(k *code) { k.limitsTTL.TimeToLiveSpecification.AttributeName = aws.String("ttl") },
		"ttl attribute":   func(k *code) { k.ttl.TimeToLiveSpecification.AttributeName = aws.String("ttl") },
		"new variable": func(k *code) {
			k.loaders["SweeperFunction"] = func(g app.Getenv) { _, _ = app.LoadSweeper(g); g("SWEEP_LIMIT") }
		},
		"variable dropped": func(k *code) { k.loaders["ChargeFunction"] = func(g app.Getenv) { _, _ = app.LoadSweeper(g) } },
		"new function":     func(k *code) { k.loaders["RefundFunction"] = func(app.Getenv) {} },
		"dev authorizer reads a variable": func(k *code) {
			k.loaders[devAuthFn] = func(g app.Getenv) { devauth.Load(g); g(app.EnvLogLevel) }
		},
		"metric dropped": func(k *code) {
			k.metrics = slices.DeleteFunc(k.metrics, func(d metrics.Definition) bool { return d.Name == metrics.MaxReconcileAttempts })
		},
		"metric renamed": func(k *code) { k.metrics[0].Name = "Commands" },
		"metric moved": func(k *code) {
			i := slices.IndexFunc(k.metrics, func(d metrics.Definition) bool { return d.Name == metrics.StuckLeases })
			k.metrics[i].Functions = []string{metrics.FunctionReconcile}
		},
		"outcome dimension dropped": func(k *code) { k.metrics[0].ByOutcome = false },
		"outcome dropped": func(k *code) {
			k.outcomes[metrics.FunctionCharge] = slices.DeleteFunc(k.outcomes[metrics.FunctionCharge],
				func(o metrics.Outcome) bool { return o == metrics.OutcomePending })
		},
		"new metric": func(k *code) {
			k.metrics = append(k.metrics, metrics.Definition{Name: "RefundLatency", Unit: metrics.UnitMilliseconds, Functions: []string{metrics.FunctionCharge}})
		},
		"intake outcome dropped": func(k *code) {
			k.outcomes[metrics.FunctionIntake] = slices.DeleteFunc(k.outcomes[metrics.FunctionIntake],
				func(o metrics.Outcome) bool { return o == metrics.OutcomeInvalid })
		},
		"intake variable dropped": func(k *code) { k.loaders["IntakeFunction"] = func(g app.Getenv) { _, _ = app.LoadCharge(g) } },
		"new outcome": func(k *code) {
			k.outcomes[metrics.FunctionReconcile] = append(k.outcomes[metrics.FunctionReconcile], "refunded")
		},
		"operation dropped": func(k *code) {
			k.operations[metrics.FunctionCharge] = slices.DeleteFunc(k.operations[metrics.FunctionCharge],
				func(o metrics.Operation) bool { return o == metrics.OperationRefund })
		},
		"new operation": func(k *code) {
			k.operations[metrics.FunctionReconcile] = append(k.operations[metrics.FunctionReconcile], "capture-charge")
		},
		"reconciler no longer reads records": func(k *code) {
			k.built = without(k.built, "functions/reconcile", reflect.TypeFor[dynamostore.Store](), reflect.TypeFor[dynamodb.GetItemInput]())
		},
		"intake no longer dead-letters": func(k *code) {
			k.built = without(k.built, "functions/intake", reflect.TypeFor[intake.Queue](), reflect.TypeFor[sqs.SendMessageInput]())
		},
		"function not built": func(k *code) { k.built = without(k.built, "functions/sweeper", nil, nil) },
		// The other way: the code builds a request its role does not allow.
		"sweeper settles claims": func(k *code) {
			k.built = with(k.built, "functions/sweeper", typeKey(reflect.TypeFor[dynamostore.Ledger]()), typeKey(reflect.TypeFor[dynamodb.UpdateItemInput]()))
		},
		"sweeper scans": func(k *code) {
			k.built = with(k.built, "functions/sweeper", optionsSet, typeKey(reflect.TypeFor[dynamostore.Options]())+".ScanStuckLeases")
		},
		"charges written in a batch": func(k *code) {
			k.built = with(k.built, "functions/charge", typeKey(reflect.TypeFor[charge.Rows]()), typeKey(reflect.TypeFor[dynamodb.BatchWriteItemInput]()))
		},
		"a request outside its table's owner": func(k *code) {
			k.built = with(k.built, "functions/charge", modulePath+"/internal/app", typeKey(reflect.TypeFor[dynamodb.PutItemInput]()))
		},
		"audit no longer indexes": func(k *code) {
			k.built = without(k.built, "functions/audit", reflect.TypeFor[audit.Index](), reflect.TypeFor[dynamodb.PutItemInput]())
		},
		"audit no longer archives": func(k *code) {
			k.built = without(k.built, "functions/audit", reflect.TypeFor[audit.Archive](), reflect.TypeFor[s3.PutObjectInput]())
		},
		"stream without the item before": func(k *code) { k.stream.StreamSpecification.StreamViewType = ddbtypes.StreamViewTypeNewImage },
		"shorter retention":              func(k *code) { k.retentionDays = 30 },
		"index key":                      func(k *code) { k.auditIndexTable.KeySchema = k.auditIndexTable.KeySchema[:1] },
	}
	for name, change := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			k := currentCode()
			change(&k)
			problems, err := check(tmpl, k)
			if err != nil {
				t.Fatal(err)
			}
			if len(problems) == 0 {
				t.Error("went unnoticed")
			}
		})
	}
}

// Template text between a queue's logical id and its first property, and
// between an SQS event's Queue and its function response type.
const (
	sqsQueueHead = "    Type: AWS::SQS::Queue\n    DeletionPolicy: Delete\n    UpdateReplacePolicy: Delete\n    Properties:\n      "
	sqsEventTail = "            BatchSize: 10\n            MaximumBatchingWindowInSeconds: 1\n            FunctionResponseTypes:\n              - "
)

// TestCheckCatchesDrift changes the template one way at a time and expects
// the check to notice each change.
func TestCheckCatchesDrift(t *testing.T) {
	t.Parallel()
	orig := readTemplate(t)
	tests := []struct{ name, old, new string }{
		{"idempotency key type", "        - AttributeName: pk\n          KeyType: HASH\n      GlobalSecondaryIndexes", "        - AttributeName: pk\n          KeyType: RANGE\n      GlobalSecondaryIndexes"},
		{"attribute type", "        - AttributeName: lease_shard\n          AttributeType: N", "        - AttributeName: lease_shard\n          AttributeType: S"},
		{"index name", "IndexName: stuck-leases", "IndexName: stuck"},
		{"index projection", "ProjectionType: INCLUDE", "ProjectionType: ALL"},
		{"index attributes", "              - attempts\n", "              - attempts\n              - status\n"},
		{"ttl attribute", "- attempts\n      TimeToLiveSpecification:\n        AttributeName: expires_at", "- attempts\n      TimeToLiveSpecification:\n        AttributeName: ttl"},
		{"ttl disabled", "- attempts\n      TimeToLiveSpecification:\n        AttributeName: expires_at\n        Enabled: true", "- attempts\n      TimeToLiveSpecification:\n        AttributeName: expires_at\n        Enabled: false"},
		{"limits ttl attribute", "      TimeToLiveSpecification:\n        AttributeName: expires_at\n        Enabled: true\n      # The operators'", "      TimeToLiveSpecification:\n        AttributeName: ttl\n        Enabled: true\n      # The operators'"},
		{"charges range key", "        - AttributeName: id\n          KeyType: RANGE", "        - AttributeName: id\n          KeyType: HASH"},
		{"billing mode", "BillingMode: PAY_PER_REQUEST\n      AttributeDefinitions:\n        - AttributeName: tenant", "BillingMode: PROVISIONED\n      AttributeDefinitions:\n        - AttributeName: tenant"},
		{"extra index", "              - attempts\n", "              - attempts\n        - IndexName: extra\n          KeySchema:\n            - AttributeName: pk\n              KeyType: HASH\n          Projection:\n            ProjectionType: KEYS_ONLY\n"},
		{"visibility timeout", "event sources.\n      VisibilityTimeout: 180", "event sources.\n      VisibilityTimeout: 30"},
		{"retention", "MessageRetentionPeriod: 345600 # 4 days\n", "MessageRetentionPeriod: 86400\n"},
		{"dlq retention", "ReconcileDeadLetterQueue:\n" + sqsQueueHead + "MessageRetentionPeriod: 1209600", "ReconcileDeadLetterQueue:\n" + sqsQueueHead + "MessageRetentionPeriod: 345600"},
		{"max receive count", "ReconcileDeadLetterQueue.Arn\n        maxReceiveCount: 5", "ReconcileDeadLetterQueue.Arn\n        maxReceiveCount: 3"},
		{"dead-letter target", "deadLetterTargetArn: !GetAtt ReconcileDeadLetterQueue.Arn", "deadLetterTargetArn: !GetAtt ReconcileQueue.Arn"},
		{"extra queue setting", "      SqsManagedSseEnabled: true\n      RedrivePolicy:\n        deadLetterTargetArn: !GetAtt ReconcileDeadLetterQueue.Arn", "      SqsManagedSseEnabled: true\n      DelaySeconds: 5\n      RedrivePolicy:\n        deadLetterTargetArn: !GetAtt ReconcileDeadLetterQueue.Arn"},
		{"reconcile timeout", "CodeUri: functions/reconcile\n      Timeout: 30", "CodeUri: functions/reconcile\n      Timeout: 60"},
		{"batch size", "Queue: !GetAtt ReconcileQueue.Arn\n            BatchSize: 10", "Queue: !GetAtt ReconcileQueue.Arn\n            BatchSize: 5"},
		{"batch item failures", "Queue: !GetAtt ReconcileQueue.Arn\n" + sqsEventTail + "ReportBatchItemFailures", "Queue: !GetAtt ReconcileQueue.Arn\n" + sqsEventTail + "SomethingElse"},
		{"event queue", "Queue: !GetAtt ReconcileQueue.Arn", "Queue: !GetAtt ReconcileDeadLetterQueue.Arn"},
		{"intake visibility timeout", "(30 s).\n      VisibilityTimeout: 180", "(30 s).\n      VisibilityTimeout: 60"},
		{"intake retention", "MessageRetentionPeriod: 345600 # 4 days, as", "MessageRetentionPeriod: 86400 # 4 days, as"},
		{"intake dlq retention", "ChargeRequestsDeadLetterQueue:\n" + sqsQueueHead + "MessageRetentionPeriod: 1209600", "ChargeRequestsDeadLetterQueue:\n" + sqsQueueHead + "MessageRetentionPeriod: 345600"},
		{"intake max receive count", "ChargeRequestsDeadLetterQueue.Arn\n        maxReceiveCount: 5", "ChargeRequestsDeadLetterQueue.Arn\n        maxReceiveCount: 10"},
		{"intake dead-letter target", "deadLetterTargetArn: !GetAtt ChargeRequestsDeadLetterQueue.Arn", "deadLetterTargetArn: !GetAtt ReconcileDeadLetterQueue.Arn"},
		{"intake timeout", "CodeUri: functions/intake\n      Timeout: 30", "CodeUri: functions/intake\n      Timeout: 10"},
		{"intake batch size", "Queue: !GetAtt ChargeRequestsQueue.Arn\n            BatchSize: 10", "Queue: !GetAtt ChargeRequestsQueue.Arn\n            BatchSize: 1"},
		{"intake batch item failures", "Queue: !GetAtt ChargeRequestsQueue.Arn\n" + sqsEventTail + "ReportBatchItemFailures", "Queue: !GetAtt ChargeRequestsQueue.Arn\n" + sqsEventTail + "SomethingElse"},
		{"intake event queue", "Queue: !GetAtt ChargeRequestsQueue.Arn", "Queue: !GetAtt ReconcileQueue.Arn"},
		{"intake variable missing", "          CHARGE_REQUESTS_DLQ_URL: !Ref ChargeRequestsDeadLetterQueue\n", ""},
		{"dashboard misses an intake outcome", `["chargeonce", "Requests", "Function", "intake", "Operation", "create-refund", "Outcome", "refund-exceeds"],`, ""},
		{"variable missing", "          INFLIGHT_WAIT: !Ref InflightWait\n          COMMIT_RESERVE: !Ref CommitReserve\n          REPLAY", "          COMMIT_RESERVE: !Ref CommitReserve\n          REPLAY"},
		{"variable not read", "          RECONCILE_QUEUE_URL: !Ref ReconcileQueue\n          LOG_LEVEL", "          RECONCILE_QUEUE_URL: !Ref ReconcileQueue\n          INFLIGHT_WAIT: 1s\n          LOG_LEVEL"},
		{"tracing layer always", "      - !If [HasTracingLayer, !Ref TracingLayerArn, !Ref AWS::NoValue]", "      - !Ref TracingLayerArn"},
		{"trace endpoint always", `OTEL_EXPORTER_OTLP_ENDPOINT: !If [HasTracingLayer, "http://localhost:4318", !Ref AWS::NoValue]`, `OTEL_EXPORTER_OTLP_ENDPOINT: "http://localhost:4318"`},
		{"tracing condition", `HasTracingLayer: !Not [!Equals [!Ref TracingLayerArn, ""]]`, `HasTracingLayer: !Equals [!Ref TracingLayerArn, ""]`},
		{"index in policy", `"${IdempotencyTable.Arn}/index/stuck-leases"`, `"${IdempotencyTable.Arn}/index/stuck"`},
		{"code dir", "CodeUri: functions/sweeper", "CodeUri: functions/sweep"},
		{"alarm metric name", "MetricName: StuckLeases", "MetricName: StuckLease"},
		{"alarm function", "MetricName: StuckLeases\n      Dimensions:\n        - Name: Function\n          Value: sweeper", "MetricName: StuckLeases\n      Dimensions:\n        - Name: Function\n          Value: charge"},
		{"alarm without dimensions", "MetricName: MaxReconcileAttempts\n      Dimensions:\n        - Name: Function\n          Value: sweeper\n", "MetricName: MaxReconcileAttempts\n"},
		{"alarm tenant dimension", "          Value: create-charge\n        - Name: Outcome\n          Value: lease-lost\n", "          Value: create-charge\n        - Name: Outcome\n          Value: lease-lost\n        - Name: Tenant\n          Value: acme\n"},
		{"alarm outcome", "                  Value: create-refund\n                - Name: Outcome\n                  Value: outcome-pending", "                  Value: create-refund\n                - Name: Outcome\n                  Value: pending"},
		{"alarm operation", "          Value: create-refund\n        - Name: Outcome\n          Value: parked", "          Value: refund\n        - Name: Outcome\n          Value: parked"},
		{"alarm without operation", "                - Name: Operation\n                  Value: create-charge\n                - Name: Outcome\n                  Value: outcome-pending", "                - Name: Outcome\n                  Value: outcome-pending"},
		{"alarm math metric", "                  Value: create-refund\n                - Name: Outcome\n                  Value: error", "                  Value: create-refund\n                - Name: Outcome\n                  Value: failed"},
		{"alarm without action", "  LeaseLostAlarm:\n    Type: AWS::CloudWatch::Alarm\n    Properties:\n      AlarmActions: [!Ref AlarmTopic]\n", "  LeaseLostAlarm:\n    Type: AWS::CloudWatch::Alarm\n    Properties:\n"},
		{"dashboard metric name", `["chargeonce", "Queued", "Function", "sweeper"]`, `["chargeonce", "QueuedKeys", "Function", "sweeper"]`},
		{"dashboard dimension", `["chargeonce", "BeginLatency", "Function", "charge"]`, `["chargeonce", "BeginLatency", "Function", "charge", "Tenant", "acme"]`},
		{"dashboard misses an outcome", `["chargeonce", "Requests", "Function", "reconcile", "Operation", "create-refund", "Outcome", "resolved-refunded"],`, ""},
		{"dashboard misses an operation", `,
                ["chargeonce", "Requests", "Function", "charge", "Operation", "none", "Outcome", "invalid"]`, ""},
		{"dashboard outcome without operation", `["chargeonce", "Requests", "Function", "charge", "Operation", "create-refund", "Outcome", "state-conflict"],`, `["chargeonce", "Requests", "Function", "charge", "Outcome", "state-conflict"],`},
		{"dashboard misses a metric", `["chargeonce", "CommitLatency", "Function", "charge"],`, ""},
		{"webhook behind the authorizer", "            Auth:\n              Authorizer: NONE\n", ""},
		{"webhook path", "Path: /webhooks/stripe", "Path: /webhook/stripe"},
		{"route dropped", "            Method: GET\n            Path: /charges/{id}\n", "            Method: GET\n            Path: /charges\n"},
		{"dev authorizer by default", "    Default: jwt\n", "    Default: sam-local-dev\n"},
		{"dev authorizer always deployed", "  DevAuthorizerFunction:\n    Type: AWS::Serverless::Function\n    Condition: UseDevAuthorizer\n", "  DevAuthorizerFunction:\n    Type: AWS::Serverless::Function\n"},
		{"dev authorizer condition", "UseDevAuthorizer: !Equals [!Ref ApiAuthorizer, sam-local-dev]", "UseDevAuthorizer: !Not [!Equals [!Ref ApiAuthorizer, jwt]]"},
		{"dev authorizer for lambda", "FunctionArn: !If [UseDevAuthorizer, !GetAtt DevAuthorizerFunction.Arn, !Ref LambdaAuthorizerArn]", "FunctionArn: !GetAtt DevAuthorizerFunction.Arn"},
		{"default authorizer", "DefaultAuthorizer: ApiAuthorizer", "DefaultAuthorizer: OtherAuthorizer"},
		{"authorizer kind fixed", "          ApiAuthorizer: !If\n            - UseJwtAuthorizer\n            - IdentitySource", "          ApiAuthorizer: !If\n            - UseDevAuthorizer\n            - IdentitySource"},
		{"jwt condition", "UseJwtAuthorizer: !Equals [!Ref ApiAuthorizer, jwt]", "UseJwtAuthorizer: !Equals [!Ref ApiAuthorizer, lambda]"},
		{"template claims sam local", "          TENANT_CLAIM: !Ref TenantClaim\n      Role: !GetAtt DevAuthorizerFunctionRole.Arn", "          TENANT_CLAIM: !Ref TenantClaim\n          AWS_SAM_LOCAL: \"true\"\n      Role: !GetAtt DevAuthorizerFunctionRole.Arn"},
		{"globals claim sam local", "        SQS_ENDPOINT: !Ref LocalEndpointUrl\n", "        SQS_ENDPOINT: !Ref LocalEndpointUrl\n        AWS_SAM_LOCAL: \"true\"\n"},
		{"local endpoint by default", "  LocalEndpointUrl:\n    Type: String\n    Default: \"\"", "  LocalEndpointUrl:\n    Type: String\n    Default: http://127.0.0.1:4566"},
		{"endpoint fixed", "DYNAMODB_ENDPOINT: !Ref LocalEndpointUrl", "DYNAMODB_ENDPOINT: http://127.0.0.1:4566"},
		{"architecture fixed", "Architectures: [!Ref LambdaArchitecture]", "Architectures: [x86_64]"},
		{"secret value in the environment", "          PROVIDER_SECRET_NAME: !Ref ProviderSecretName\n          TENANT_CLAIM", "          PROVIDER_SECRET_NAME: !Ref ProviderSecretName\n          PROVIDER_KEY: sk_live_51Habcdef\n          TENANT_CLAIM"},
		{"dynamic reference", "          STRIPE_WEBHOOK_SECRET_NAME: !Ref StripeWebhookSecretName\n", "          STRIPE_WEBHOOK_SECRET_NAME: !Sub \"{{resolve:secretsmanager:${StripeWebhookSecretName}:SecretString}}\"\n"},
		{"secrets readable by all", "                Action: secretsmanager:GetSecretValue\n                Resource:\n", "                Action: secretsmanager:GetSecretValue\n                Resource: \"*\"\n                NotResource:\n"},
		{"secrets wildcard action", "              - Sid: ReadSecrets\n                Effect: Allow\n                Action: secretsmanager:GetSecretValue\n                Resource:\n", "              - Sid: ReadSecrets\n                Effect: Allow\n                Action: secretsmanager:*\n                Resource:\n"},
		{"webhook secret not granted", "                  - !If\n                    - HasStripeWebhookSecret\n", "                  - !If\n                    - HasSecretsKmsKey\n"},
		{"sweeper reads secrets", "              - Sid: QueryStuckLeases\n", "              - Sid: ReadSecrets\n                Effect: Allow\n                Action: secretsmanager:GetSecretValue\n                Resource: !Sub \"arn:${AWS::Partition}:secretsmanager:${AWS::Region}:${AWS::AccountId}:secret:${ProviderSecretName}-??????\"\n              - Sid: QueryStuckLeases\n"},
		{"kms key always", "DeadLetterQueue.Arn\n              - Sid: ReadSecrets\n                Effect: Allow\n                Action: secretsmanager:GetSecretValue\n                Resource: !Sub \"arn:${AWS::Partition}:secretsmanager:${AWS::Region}:${AWS::AccountId}:secret:${ProviderSecretName}-??????\"\n              - !If\n                - HasSecretsKmsKey\n", "DeadLetterQueue.Arn\n              - Sid: ReadSecrets\n                Effect: Allow\n                Action: secretsmanager:GetSecretValue\n                Resource: !Sub \"arn:${AWS::Partition}:secretsmanager:${AWS::Region}:${AWS::AccountId}:secret:${ProviderSecretName}-??????\"\n              - !If\n                - HasTracingLayer\n"},
		{"x86_64 by default", "    Default: arm64\n", "    Default: x86_64\n"},
		{"provider over http", "(https).\n    AllowedPattern: \"^https://", "(https).\n    AllowedPattern: \"^https?://"},
		{"intake may delete records", "into a first charge.\n              - Sid: IdempotencyRecords\n                Effect: Allow\n                Action:\n", "into a first charge.\n              - Sid: IdempotencyRecords\n                Effect: Allow\n                Action:\n                  - dynamodb:DeleteItem\n"},
		{"charge may check conditions", "as its item action.\n              - Sid: IdempotencyRecords\n                Effect: Allow\n                Action:\n", "as its item action.\n              - Sid: IdempotencyRecords\n                Effect: Allow\n                Action:\n                  - dynamodb:ConditionCheckItem\n"},
		{"reconcile may claim", "never claims one.\n              - Sid: IdempotencyRecords\n                Effect: Allow\n                Action:\n", "never claims one.\n              - Sid: IdempotencyRecords\n                Effect: Allow\n                Action:\n                  - dynamodb:PutItem\n"},
		{"reconcile may query charges", "refund's hold.\n              - Sid: Charges\n                Effect: Allow\n                Action:\n", "refund's hold.\n              - Sid: Charges\n                Effect: Allow\n                Action:\n                  - dynamodb:Query\n"},
		{"sweeper may send to the DLQ", "GlobalChargesTable}\"]\n              - Sid: EnqueueReconcile\n                Effect: Allow\n                Action: sqs:SendMessage\n                Resource: !GetAtt ReconcileQueue.Arn", "GlobalChargesTable}\"]\n              - Sid: EnqueueReconcile\n                Effect: Allow\n                Action: sqs:SendMessage\n                Resource: !GetAtt ChargeRequestsDeadLetterQueue.Arn"},
		{"logs on every group", "Resource: !GetAtt ChargeFunctionLogGroup.Arn", "Resource: \"*\""},
		{"logs to another function's group", "Resource: !GetAtt SweeperFunctionLogGroup.Arn", "Resource: !GetAtt ChargeFunctionLogGroup.Arn"},
		{"may create log groups", "                  - logs:CreateLogStream\n                  - logs:PutLogEvents\n                Resource: !GetAtt ChargeFunctionLogGroup.Arn", "                  - logs:CreateLogGroup\n                  - logs:CreateLogStream\n                  - logs:PutLogEvents\n                Resource: !GetAtt ChargeFunctionLogGroup.Arn"},
		{"polls a queue it has no event for", "                  - sqs:GetQueueAttributes\n                Resource: !GetAtt ChargeRequestsQueue.Arn", "                  - sqs:GetQueueAttributes\n                Resource: !GetAtt ReconcileQueue.Arn"},
		{"xray without tracing", "    Tracing: Active\n", "    Tracing: PassThrough\n"},
		{"managed policy", "  ChargeFunctionRole:\n    Type: AWS::IAM::Role\n    Properties:\n", "  ChargeFunctionRole:\n    Type: AWS::IAM::Role\n    Properties:\n      ManagedPolicyArns:\n        - !Sub \"arn:${AWS::Partition}:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole\"\n"},
		{"trusts another service", "  ChargeFunctionRole:\n    Type: AWS::IAM::Role\n    Properties:\n      AssumeRolePolicyDocument:\n        Version: \"2012-10-17\"\n        Statement:\n          - Effect: Allow\n            Principal:\n              Service: lambda.amazonaws.com", "  ChargeFunctionRole:\n    Type: AWS::IAM::Role\n    Properties:\n      AssumeRolePolicyDocument:\n        Version: \"2012-10-17\"\n        Statement:\n          - Effect: Allow\n            Principal:\n              Service: ec2.amazonaws.com"},
		{"shared role", "Role: !GetAtt SweeperFunctionRole.Arn", "Role: !GetAtt ChargeFunctionRole.Arn"},
		{"shared log group", "LogGroup: !Ref SweeperFunctionLogGroup", "LogGroup: !Ref ChargeFunctionLogGroup"},
		{"policies beside the role", "      Role: !GetAtt IntakeFunctionRole.Arn\n", "      Role: !GetAtt IntakeFunctionRole.Arn\n      Policies: AWSLambdaBasicExecutionRole\n"},
		{"no log group of its own", "      LoggingConfig:\n        LogGroup: !Ref ReconcileFunctionLogGroup\n", ""},
		{"log lines kept for ever", "/IntakeFunction\"\n      RetentionInDays: !Ref LogRetentionDays\n", "/IntakeFunction\"\n"},
		{"log retention default", "    Default: 90\n", "    Default: 3653\n"},
		{"limits table unprotected", "      # The operators' limits are in it: a DeleteTable call must not drop\n      # them unseen.\n      DeletionProtectionEnabled: true\n", ""},
		{"limits range key", "        - AttributeName: sk\n          KeyType: RANGE", "        - AttributeName: sk\n          KeyType: HASH"},
		{"deferrable route unthrottled", "        \"GET /charges/{id}/refunds/{refund_id}\":\n          ThrottlingRateLimit: !Ref ApiDeferrableRateLimit\n          ThrottlingBurstLimit: !Ref ApiDeferrableBurstLimit\n", ""},
		{"limits variable missing", "          LIMITS_TABLE: !Ref LimitsTable\n", ""},
		{"charge may put limits", "              - Sid: TenantLimits\n                Effect: Allow\n                Action:\n", "              - Sid: TenantLimits\n                Effect: Allow\n                Action:\n                  - dynamodb:PutItem\n"},
		{"charges table unprotected", "      # Retained with the stack, and refused to a DeleteTable call.\n      DeletionProtectionEnabled: true\n", ""},
		{"queue policy allows", "          - Sid: NamedProducersOnly\n            Effect: Deny", "          - Sid: NamedProducersOnly\n            Effect: Allow"},
		{"queue policy denies the producers", "              - ArnNotEquals:\n", "              - ArnEquals:\n"},
		{"queue policy on another queue", "        - !Ref ChargeRequestsQueue\n      PolicyDocument:", "        - !Ref ReconcileQueue\n      PolicyDocument:"},
		{"audit may delete entries", "                Action: s3:PutObject\n", "                Action:\n                  - s3:PutObject\n                  - s3:DeleteObjectVersion\n"},
		{"audit may shorten a retention", "                Action: s3:PutObject\n", "                Action:\n                  - s3:PutObject\n                  - s3:PutObjectRetention\n"},
		{"audit writes anywhere in the bucket", `Resource: !Sub "${AuditBucket.Arn}/entries/*"`, `Resource: !Sub "${AuditBucket.Arn}/*"`},
		{"another function writes the bucket", "              - Sid: QueryStuckLeases\n", "              - Sid: Peek\n                Effect: Allow\n                Action: s3:GetObject\n                Resource: !Sub \"${AuditBucket.Arn}/entries/*\"\n              - Sid: QueryStuckLeases\n"},
		{"audit may delete index items", "                Action: dynamodb:PutItem\n                Resource: !GetAtt AuditIndexTable.Arn", "                Action:\n                  - dynamodb:PutItem\n                  - dynamodb:DeleteItem\n                Resource: !GetAtt AuditIndexTable.Arn"},
		{"governance mode", "            Mode: COMPLIANCE", "            Mode: GOVERNANCE"},
		{"lock off", "      ObjectLockEnabled: true\n", "      ObjectLockEnabled: false\n"},
		{"retention default", "    Default: 400\n", "    Default: 365\n"},
		{"index retention default", "    Default: 92\n", "    Default: 30\n"},
		{"index outlives the archive", "    Default: 400\n    MinValue: 365\n", "    Default: 400\n    MinValue: 30\n"},
		{"lifecycle expires sooner", "            ExpirationInDays: !Ref AuditRetentionDays", "            ExpirationInDays: 30"},
		{"versioning suspended", "      VersioningConfiguration:\n        Status: Enabled", "      VersioningConfiguration:\n        Status: Suspended"},
		{"trail deleted with the stack", "  AuditBucket:\n    Type: AWS::S3::Bucket\n    DeletionPolicy: Retain", "  AuditBucket:\n    Type: AWS::S3::Bucket\n    DeletionPolicy: Delete"},
		{"bucket policy allows", "          - Sid: TLSOnly\n            Effect: Deny", "          - Sid: TLSOnly\n            Effect: Allow"},
		{"no stream on the records", "TTL's deletions too.\n      StreamSpecification:\n        StreamViewType: NEW_AND_OLD_IMAGES\n", "TTL's deletions too.\n"},
		{"stream without old images", "(AuditFunction).\n      StreamSpecification:\n        StreamViewType: NEW_AND_OLD_IMAGES", "(AuditFunction).\n      StreamSpecification:\n        StreamViewType: NEW_IMAGE"},
		{"audit skips a failing batch", "GlobalIdempotencyStreamLabel}\"]\n            StartingPosition: TRIM_HORIZON\n            BatchSize: 1000\n            MaximumBatchingWindowInSeconds: 5\n            BisectBatchOnFunctionError: true\n            MaximumRetryAttempts: -1", "GlobalIdempotencyStreamLabel}\"]\n            StartingPosition: TRIM_HORIZON\n            BatchSize: 1000\n            MaximumBatchingWindowInSeconds: 5\n            BisectBatchOnFunctionError: true\n            MaximumRetryAttempts: 3"},
		{"audit from the latest change", "GlobalChargesStreamLabel}\"]\n            StartingPosition: TRIM_HORIZON", "GlobalChargesStreamLabel}\"]\n            StartingPosition: LATEST"},
		{"audit reads one stream", "        ChargesStream:\n          Type: DynamoDB", "        ChargesStream:\n          Type: Kinesis"},
		{"no alarm on the trail's lag", "      MetricName: IteratorAge\n", "      MetricName: Throttles\n"},
		{"no alarm on the trail's discards", "          Value: !GetAtt AuditDeadLetterQueue.QueueName", "          Value: !GetAtt ReconcileDeadLetterQueue.QueueName"},
		{"stream actions on the table", "                  - !If [OwnsTables, !GetAtt IdempotencyTable.StreamArn,", "                  - !If [OwnsTables, !GetAtt IdempotencyTable.Arn,"},
		{"stream actions on another replica's stream", "table/${GlobalChargesTable}/stream/${GlobalChargesStreamLabel}\"]\n              - Sid: ListStreams", "table/${GlobalChargesTable}\"]\n              - Sid: ListStreams"},
		{"audit reads its own stack's table only", "Stream: !If [OwnsTables, !GetAtt ChargesTable.StreamArn, !Sub", "Stream: !If [OwnsTables, !GetAtt IdempotencyTable.StreamArn, !Sub"},
		{"sweeper marks another table", "              - Sid: MarkQueuedMoves\n                Effect: Allow\n                Action: dynamodb:UpdateItem\n                Resource: !If [OwnsTables, !GetAtt ChargesTable.Arn", "              - Sid: MarkQueuedMoves\n                Effect: Allow\n                Action: dynamodb:UpdateItem\n                Resource: !If [OwnsTables, !GetAtt AuditIndexTable.Arn"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if strings.Count(orig, tt.old) != 1 {
				t.Fatalf("template.yaml holds %q %d times, want once: update this case", tt.old, strings.Count(orig, tt.old))
			}
			problems, err := check(strings.Replace(orig, tt.old, tt.new, 1), currentCode())
			if err != nil {
				t.Fatal(err)
			}
			if len(problems) == 0 {
				t.Errorf("replacing %q by %q went unnoticed", tt.old, tt.new)
			}
		})
	}
}

// check parses a template and lists how it differs from the code.
func check(src string, k code) ([]string, error) {
	if k.builtErr != nil {
		return nil, k.builtErr
	}
	tmpl, err := parseTemplate(src)
	if err != nil {
		return nil, err
	}
	c := &checker{tmpl: tmpl}
	c.table(idempotencyTable, k.idempotencyTable)
	c.ttl(idempotencyTable, k.ttl, dynamostore.AttrExpiresAt)
	c.table(chargesTable, k.chargesTable)
	c.table(limitsTable, k.limitsTable)
	c.ttl(limitsTable, k.limitsTTL, limit.AttrExpiresAt)
	c.table(auditIndex, k.auditIndexTable)
	c.ttl(auditIndex, k.auditIndexTTL, audit.AttrExpires)
	c.streams(k.stream, idempotencyTable, chargesTable)
	c.trail(k.lock, k.retentionDays, k.indexDays, k.indexMaxDays)
	c.trailAlarms()
	c.queues(reconcileQueue, deadLetterQueue)
	c.queues(intakeQueue, intakeDLQ)
	c.sqsFunction(reconcileFn, reconcileQueue, queue.ReconcileTimeout)
	c.sqsFunction(intakeFn, intakeQueue, queue.IntakeTimeout)
	c.sweeperPolicy()
	c.routes(k.routes, k.public)
	c.throttles(k.deferrable)
	c.authorizers()
	c.localOnly()
	c.environments(k.loaders, k.unread)
	c.tracing()
	c.metrics(k.metrics, k.operations, k.outcomes)
	c.secretValues()
	c.secretGrants(k.secretNames)
	c.roles()
	c.grants(k.built)
	c.appendOnly()
	c.queuePolicy()
	return c.problems, nil
}

type checker struct {
	tmpl     map[string]any
	problems []string
}

func (c *checker) fail(format string, args ...any) {
	c.problems = append(c.problems, fmt.Sprintf(format, args...))
}

func (c *checker) resource(id string) map[string]any {
	r := asMap(asMap(c.tmpl["Resources"])[id])
	if r == nil {
		c.fail("template has no resource %s", id)
		return map[string]any{}
	}
	return r
}

func (c *checker) props(id string) map[string]any {
	p, _ := c.resource(id)["Properties"].(map[string]any)
	if p == nil {
		return map[string]any{}
	}
	return p
}

// table compares a table's billing mode, keys, attributes and indexes
// with the CreateTable request the code makes.
func (c *checker) table(id string, want *dynamodb.CreateTableInput) {
	c.schema(id, want)
	// Not the code's: a table it creates goes with its emulator.
	c.equal(id+" DeletionProtectionEnabled", c.props(id)["DeletionProtectionEnabled"], true)
}

// schema compares a table's billing mode, keys and indexes with want's.
func (c *checker) schema(id string, want *dynamodb.CreateTableInput) {
	p := c.props(id)
	c.equal(id+" BillingMode", p["BillingMode"], string(want.BillingMode))
	c.equal(id+" KeySchema", p["KeySchema"], keySchema(want.KeySchema))
	var attrs []any
	for _, a := range want.AttributeDefinitions {
		attrs = append(attrs, map[string]any{"AttributeName": aws.ToString(a.AttributeName), "AttributeType": string(a.AttributeType)})
	}
	c.equal(id+" AttributeDefinitions", sortByName(p["AttributeDefinitions"], "AttributeName"), sortByName(attrs, "AttributeName"))
	var gsis []any
	for _, g := range want.GlobalSecondaryIndexes {
		proj := map[string]any{"ProjectionType": string(g.Projection.ProjectionType)}
		if len(g.Projection.NonKeyAttributes) > 0 {
			proj["NonKeyAttributes"] = toAny(g.Projection.NonKeyAttributes)
		}
		gsis = append(gsis, map[string]any{"IndexName": aws.ToString(g.IndexName), "KeySchema": keySchema(g.KeySchema), "Projection": proj})
	}
	c.equal(id+" GlobalSecondaryIndexes", sortByName(p["GlobalSecondaryIndexes"], "IndexName"), sortByName(gsis, "IndexName"))
}

// ttl compares a table's TTL with the code's, which must be on attr, the
// attribute the code writes expiries to.
func (c *checker) ttl(id string, want *dynamodb.UpdateTimeToLiveInput, attr string) {
	spec := want.TimeToLiveSpecification
	c.equal(id+" TimeToLiveSpecification", c.props(id)["TimeToLiveSpecification"], map[string]any{
		"AttributeName": aws.ToString(spec.AttributeName), "Enabled": aws.ToBool(spec.Enabled),
	})
	if aws.ToString(spec.AttributeName) != attr {
		c.fail("%s's TTLInput enables TTL on %q, not %q, where the code writes expiries", id, aws.ToString(spec.AttributeName), attr)
	}
}

// queues compares a queue and its DLQ with the attributes queue.Create
// sets.
func (c *checker) queues(mainID, dlqID string) {
	created, err := createdQueues()
	if err != nil {
		c.fail("queue.Create: %v", err)
		return
	}
	for id, name := range map[string]string{mainID: "q", dlqID: "q-dlq"} {
		want := created[name]
		got := c.props(id)
		for attr, v := range want {
			if attr == string(sqstypes.QueueAttributeNameRedrivePolicy) {
				c.redrive(id, dlqID, got[attr], v)
				continue
			}
			c.equal(id+" "+attr, fmt.Sprint(got[attr]), v)
		}
		for attr := range got {
			if _, ok := want[attr]; !ok && attr != "SqsManagedSseEnabled" {
				c.fail("%s sets %s, which queue.Create does not", id, attr)
			}
		}
	}
	c.equal(mainID+" queue.VisibilityTimeout", fmt.Sprint(c.props(mainID)["VisibilityTimeout"]), seconds(queue.VisibilityTimeout))
	c.equal(mainID+" queue.Retention", fmt.Sprint(c.props(mainID)["MessageRetentionPeriod"]), seconds(queue.Retention))
	c.equal(dlqID+" queue.DLQRetention", fmt.Sprint(c.props(dlqID)["MessageRetentionPeriod"]), seconds(queue.DLQRetention))
}

func (c *checker) redrive(id, dlqID string, got any, want string) {
	var w map[string]any
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		c.fail("queue.Create's redrive policy %q: %v", want, err)
		return
	}
	g, _ := got.(map[string]any)
	c.equal(id+" maxReceiveCount", fmt.Sprint(g["maxReceiveCount"]), fmt.Sprint(w["maxReceiveCount"]))
	c.equal(id+" maxReceiveCount", fmt.Sprint(g["maxReceiveCount"]), strconv.Itoa(queue.MaxReceiveCount))
	if w["deadLetterTargetArn"] != fakeARN("q-dlq") {
		c.fail("queue.Create's redrive policy targets %v, not its DLQ", w["deadLetterTargetArn"])
	}
	c.equal(id+" deadLetterTargetArn", g["deadLetterTargetArn"], getAtt(dlqID, "Arn"))
	if len(g) != 2 {
		c.fail("%s RedrivePolicy has %d members, want deadLetterTargetArn and maxReceiveCount", id, len(g))
	}
}

// sqsFunction checks the timeout and the SQS event source the queue
// settings and the function's handler assume.
func (c *checker) sqsFunction(fn, queueID string, timeout time.Duration) {
	p := c.props(fn)
	c.equal(fn+" Timeout", fmt.Sprint(p["Timeout"]), seconds(timeout))
	if 6*timeout > queue.VisibilityTimeout {
		c.fail("%s's timeout %s is more than a sixth of the queues' visibility timeout %s", fn, timeout, queue.VisibilityTimeout)
	}
	evs, _ := p["Events"].(map[string]any)
	found := 0
	for name, e := range evs {
		e, _ := e.(map[string]any)
		if e["Type"] != "SQS" {
			continue
		}
		found++
		ep, _ := e["Properties"].(map[string]any)
		c.equal(fn+" event "+name+" Queue", ep["Queue"], getAtt(queueID, "Arn"))
		c.equal(fn+" event "+name+" BatchSize", fmt.Sprint(ep["BatchSize"]), strconv.Itoa(queue.BatchSize))
		// The handler answers batch item failures; without this Lambda
		// would ignore them and delete every message.
		c.equal(fn+" event "+name+" FunctionResponseTypes", ep["FunctionResponseTypes"], []any{"ReportBatchItemFailures"})
	}
	if found != 1 {
		c.fail("%s has %d SQS events, want 1", fn, found)
	}
}

// routes checks that the charge function's HTTP API events are exactly
// the routes its handler serves, each behind the JWT authorizer (the API's
// default) unless it is public, and then with the authorizer turned off.
func (c *checker) routes(routes, public []string) {
	found := map[string]bool{}
	for name, e := range asMap(c.props("ChargeFunction")["Events"]) {
		if asMap(e)["Type"] != "HttpApi" {
			continue
		}
		p := asMap(asMap(e)["Properties"])
		key := fmt.Sprint(p["Method"], " ", p["Path"])
		found[key] = true
		if !slices.Contains(routes, key) {
			c.fail("ChargeFunction event %s routes %s, which the handler does not serve", name, key)
			continue
		}
		c.equal("ChargeFunction event "+name+" ApiId", p["ApiId"], map[string]any{"Ref": "HttpApi"})
		var want any // the API's default authorizer
		if slices.Contains(public, key) {
			want = map[string]any{"Authorizer": "NONE"}
		}
		c.equal("ChargeFunction event "+name+" Auth", p["Auth"], want)
	}
	for _, key := range routes {
		if !found[key] {
			c.fail("the handler serves %s, which no ChargeFunction event routes", key)
		}
	}
}

// throttles checks that API Gateway gives its smaller rate to exactly the
// routes the handler sheds first.
func (c *checker) throttles(deferrable []string) {
	got := slices.Sorted(maps.Keys(asMap(c.props("HttpApi")["RouteSettings"])))
	c.equal("HttpApi RouteSettings routes", got, slices.Sorted(slices.Values(deferrable)))
}

// sweeperPolicy checks that the sweeper may query the index it reads.
func (c *checker) sweeperPolicy() {
	want := map[string]any{"Fn::If": []any{"OwnsTables",
		map[string]any{"Fn::Sub": "${" + idempotencyTable + ".Arn}/index/" + dynamostore.IndexStuckLeases},
		map[string]any{"Fn::Sub": "arn:${AWS::Partition}:dynamodb:${AWS::Region}:${AWS::AccountId}:table/${GlobalIdempotencyTable}/index/" + dynamostore.IndexStuckLeases},
	}}
	for _, st := range c.statements("SweeperFunction") {
		if asMap(st)["Action"] == "dynamodb:Query" {
			c.equal("SweeperFunction dynamodb:Query resource", asMap(st)["Resource"], want)
			return
		}
	}
	c.fail("SweeperFunction has no dynamodb:Query statement")
}

// environments checks that each function's template environment is
// exactly what its loader reads, and that its code directory exists.
// runtimeSets are the variables a function reads that Lambda sets (its
// reserved runtime variables), and SAM CLI's AWS_SAM_LOCAL.
var runtimeSets = []string{"AWS_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", devauth.EnvSAMLocal}

func (c *checker) environments(loaders map[string]func(app.Getenv), unread map[string][]string) {
	res, _ := c.tmpl["Resources"].(map[string]any)
	var global map[string]any
	if g := asMap(asMap(asMap(asMap(c.tmpl["Globals"])["Function"])["Environment"])["Variables"]); g != nil {
		global = g
	}
	for id, r := range res {
		if asMap(r)["Type"] != "AWS::Serverless::Function" {
			continue
		}
		load, ok := loaders[id]
		if !ok {
			c.fail("function %s has no loader in this test", id)
			continue
		}
		read := map[string]bool{}
		load(func(name string) string { read[name] = true; return "" })
		set := map[string]bool{}
		for name := range global {
			set[name] = true
		}
		for name := range asMap(asMap(c.props(id)["Environment"])["Variables"]) {
			set[name] = true
		}
		for _, name := range slices.Sorted(maps.Keys(read)) {
			if !set[name] && !slices.Contains(runtimeSets, name) {
				c.fail("%s reads %s, which the template does not set", id, name)
			}
		}
		for _, name := range slices.Sorted(maps.Keys(set)) {
			if !read[name] && !(global[name] != nil && slices.Contains(unread[id], name)) {
				c.fail("the template sets %s on %s, which does not read it", name, id)
			}
		}
		if set[devauth.EnvSAMLocal] {
			c.fail("the template sets %s on %s: SAM CLI alone may, or a deployed development authorizer would let callers in", devauth.EnvSAMLocal, id)
		}
		dir, _ := c.props(id)["CodeUri"].(string)
		if _, err := os.Stat(filepath.Join(testkit.RepoRoot(), dir, "main.go")); err != nil {
			c.fail("%s CodeUri %q: %v", id, dir, err)
		}
	}
	for id := range loaders {
		if _, ok := res[id]; !ok {
			c.fail("template has no function %s", id)
		}
	}
}

// authorizers checks how ApiAuthorizer picks the API's authorizer, and
// that with the parameters' defaults, as a deployment that names none of
// them gets, the API has the JWT authorizer alone and no development
// authorizer is deployed.
func (c *checker) authorizers() {
	ref := func(name string) any { return map[string]any{"Ref": name} }
	ifc := func(cond string, yes, no any) any { return map[string]any{"Fn::If": []any{cond, yes, no}} }
	equals := func(a, b any) any { return map[string]any{"Fn::Equals": []any{a, b}} }
	conds := asMap(c.tmpl["Conditions"])
	c.equal("Conditions UseJwtAuthorizer", conds["UseJwtAuthorizer"], equals(ref("ApiAuthorizer"), "jwt"))
	c.equal("Conditions UseDevAuthorizer", conds["UseDevAuthorizer"], equals(ref("ApiAuthorizer"), "sam-local-dev"))
	c.equal("ApiAuthorizer Default", asMap(asMap(c.tmpl["Parameters"])["ApiAuthorizer"])["Default"], "jwt")

	auth := asMap(c.props("HttpApi")["Auth"])
	c.equal("HttpApi DefaultAuthorizer", auth["DefaultAuthorizer"], "ApiAuthorizer")
	authorizers := asMap(auth["Authorizers"])
	if len(authorizers) != 1 {
		c.fail("HttpApi has the authorizers %v, want ApiAuthorizer alone", slices.Sorted(maps.Keys(authorizers)))
	}
	kind := asList(asMap(authorizers["ApiAuthorizer"])["Fn::If"])
	if len(kind) != 3 || kind[0] != "UseJwtAuthorizer" || asMap(kind[1])["JwtConfiguration"] == nil {
		c.fail("HttpApi ApiAuthorizer is %s, want the JWT authorizer if UseJwtAuthorizer, else a Lambda one", show(authorizers["ApiAuthorizer"]))
	} else {
		c.equal("HttpApi ApiAuthorizer's Lambda FunctionArn", asMap(kind[2])["FunctionArn"],
			ifc("UseDevAuthorizer", getAtt(devAuthFn, "Arn"), ref("LambdaAuthorizerArn")))
	}
	c.equal(devAuthFn+" Condition", c.resource(devAuthFn)["Condition"], "UseDevAuthorizer")

	defaults := c.defaults()
	if c.holds("UseDevAuthorizer", defaults) || !c.holds("UseJwtAuthorizer", defaults) {
		c.fail("with the parameters' defaults the development authorizer is deployed, or the JWT authorizer is not the API's")
	}
}

// localOnly checks the parameters `sam local` passes: the emulator's
// endpoint, empty by default, which package awsenv takes for AWS, the
// architecture, arm64 by default, and the provider's URL, which a
// deployment takes over https only (sam local does not check the pattern).
func (c *checker) localOnly() {
	params := asMap(c.tmpl["Parameters"])
	c.equal("LocalEndpointUrl Default", asMap(params["LocalEndpointUrl"])["Default"], "")
	c.equal("ProviderUrl AllowedPattern", asMap(params["ProviderUrl"])["AllowedPattern"], `^https://\S+$`)
	fn := asMap(asMap(c.tmpl["Globals"])["Function"])
	vars := asMap(asMap(fn["Environment"])["Variables"])
	for _, name := range []string{awsenv.EnvDynamoDBEndpoint, awsenv.EnvSQSEndpoint, awsenv.EnvSecretsManagerEndpoint, awsenv.EnvS3Endpoint} {
		c.equal("Globals "+name, vars[name], map[string]any{"Ref": "LocalEndpointUrl"})
	}
	c.equal("Globals Architectures", fn["Architectures"], []any{map[string]any{"Ref": "LambdaArchitecture"}})
	c.equal("LambdaArchitecture Default", asMap(params["LambdaArchitecture"])["Default"], "arm64")
}

// defaults are the parameters' default values, by name.
func (c *checker) defaults() map[string]any {
	out := map[string]any{}
	for name, p := range asMap(c.tmpl["Parameters"]) {
		if d, ok := asMap(p)["Default"]; ok {
			out[name] = d
		}
	}
	return out
}

// holds evaluates a condition of the template with the given parameters,
// for the Fn::Equals, Fn::Not and Ref forms its conditions use; any other
// form is noted and holds.
func (c *checker) holds(name string, params map[string]any) bool {
	var eval func(v any) bool
	value := func(v any) any {
		if r, ok := asMap(v)["Ref"]; ok {
			return fmt.Sprint(params[fmt.Sprint(r)])
		}
		return fmt.Sprint(v)
	}
	eval = func(v any) bool {
		m := asMap(v)
		switch {
		case len(asList(m["Fn::Equals"])) == 2:
			args := asList(m["Fn::Equals"])
			return value(args[0]) == value(args[1])
		case len(asList(m["Fn::Not"])) == 1:
			return !eval(asList(m["Fn::Not"])[0])
		}
		c.fail("condition %s: cannot evaluate %s", name, show(v))
		return true
	}
	return eval(asMap(c.tmpl["Conditions"])[name])
}

// tracing checks that the functions get the ADOT collector layer and the
// variable that turns tracing on (app.EnvTraceEndpoint) together, both only
// when TracingLayerArn is set.
func (c *checker) tracing() {
	const cond = "HasTracingLayer"
	noValue := map[string]any{"Ref": "AWS::NoValue"}
	c.equal("Conditions "+cond, asMap(c.tmpl["Conditions"])[cond],
		map[string]any{"Fn::Not": []any{map[string]any{"Fn::Equals": []any{map[string]any{"Ref": "TracingLayerArn"}, ""}}}})
	fn := asMap(asMap(c.tmpl["Globals"])["Function"])
	c.equal("Globals Layers", fn["Layers"], []any{map[string]any{"Fn::If": []any{cond, map[string]any{"Ref": "TracingLayerArn"}, noValue}}})
	endpoint := asList(asMap(asMap(asMap(fn["Environment"])["Variables"])[app.EnvTraceEndpoint])["Fn::If"])
	if len(endpoint) != 3 || endpoint[0] != cond || endpoint[1] == "" || !reflect.DeepEqual(endpoint[2], noValue) {
		c.fail("Globals %s is %v, want set only if %s", app.EnvTraceEndpoint, endpoint, cond)
	}
}

// metrics checks that every alarm notifies the alarm topic, that every
// metric of the namespace chargeonce an alarm or the dashboard names is one
// the code emits, under dimensions it emits it with, and that the
// dashboard shows every metric, every operation and every outcome the code
// emits.
func (c *checker) metrics(defs []metrics.Definition, operations map[string][]metrics.Operation, outcomes map[string][]metrics.Outcome) {
	m := &metricCheck{checker: c, defs: defs, operations: operations, outcomes: outcomes, shown: map[string]bool{}}
	for _, id := range slices.Sorted(maps.Keys(asMap(c.tmpl["Resources"]))) {
		switch asMap(asMap(c.tmpl["Resources"])[id])["Type"] {
		case "AWS::CloudWatch::Alarm":
			m.alarm(id)
		case "AWS::CloudWatch::Dashboard":
			m.dashboard(id)
		}
	}
	if !m.dashboards {
		c.fail("template has no AWS::CloudWatch::Dashboard")
	}
	for _, d := range defs {
		for _, f := range d.Functions {
			if !m.shown[string(d.Name)+" "+f] {
				c.fail("the dashboard does not show %s of Function=%s", d.Name, f)
			}
			if !d.ByOutcome {
				continue
			}
			for _, op := range operations[f] {
				if !m.shown[string(d.Name)+" "+f+" operation "+string(op)] {
					c.fail("the dashboard does not show %s of Function=%s, Operation=%s", d.Name, f, op)
				}
			}
			for _, o := range outcomes[f] {
				if !m.shown[string(d.Name)+" "+f+" "+string(o)] {
					c.fail("the dashboard does not show %s of Function=%s, Outcome=%s", d.Name, f, o)
				}
			}
		}
	}
}

type metricCheck struct {
	*checker
	defs       []metrics.Definition
	operations map[string][]metrics.Operation
	outcomes   map[string][]metrics.Outcome
	// shown: "name function", "name function operation op" and "name
	// function outcome" (under any operation) on the dashboard.
	shown      map[string]bool
	dashboards bool
}

func (m *metricCheck) alarm(id string) {
	p := m.props(id)
	if !slices.ContainsFunc(asList(p["AlarmActions"]), func(a any) bool { return reflect.DeepEqual(a, map[string]any{"Ref": "AlarmTopic"}) }) {
		m.fail("alarm %s does not notify AlarmTopic", id)
	}
	metric := func(where string, ns, name any, dims []any) {
		if ns != metrics.Namespace {
			return
		}
		names := map[string]string{}
		for _, d := range dims {
			names[fmt.Sprint(asMap(d)["Name"])] = fmt.Sprint(asMap(d)["Value"])
		}
		m.emitted(where, fmt.Sprint(name), names)
	}
	metric("alarm "+id, p["Namespace"], p["MetricName"], asList(p["Dimensions"]))
	for _, q := range asList(p["Metrics"]) {
		mt := asMap(asMap(asMap(q)["MetricStat"])["Metric"])
		metric("alarm "+id+" metric "+fmt.Sprint(asMap(q)["Id"]), mt["Namespace"], mt["MetricName"], asList(mt["Dimensions"]))
	}
}

// dashboard reads the metrics of the dashboard's widgets, in their
// ["namespace", "name", "dim", "value", ..., {options}] form.
func (m *metricCheck) dashboard(id string) {
	m.dashboards = true
	sub := asMap(m.props(id)["DashboardBody"])["Fn::Sub"]
	var body struct {
		Widgets []struct {
			Properties struct {
				Title   string
				Metrics [][]any
			}
		}
	}
	if err := json.Unmarshal([]byte(fmt.Sprint(sub)), &body); err != nil {
		m.fail("%s DashboardBody is not a !Sub of JSON: %v", id, err)
		return
	}
	for _, w := range body.Widgets {
		for _, line := range w.Properties.Metrics {
			var parts []string
			for _, v := range line {
				if s, ok := v.(string); ok {
					parts = append(parts, s)
				}
			}
			if len(parts) < 2 || parts[0] != metrics.Namespace {
				continue
			}
			if len(parts)%2 != 0 {
				m.fail("dashboard widget %q: metric %v has a dimension without a value", w.Properties.Title, parts)
				continue
			}
			dims := map[string]string{}
			for i := 2; i < len(parts); i += 2 {
				dims[parts[i]] = parts[i+1]
			}
			if m.emitted(fmt.Sprintf("dashboard widget %q", w.Properties.Title), parts[1], dims) {
				m.shown[parts[1]+" "+dims[metrics.DimFunction]] = true
				if op, ok := dims[metrics.DimOperation]; ok {
					m.shown[parts[1]+" "+dims[metrics.DimFunction]+" operation "+op] = true
				}
				if o, ok := dims[metrics.DimOutcome]; ok {
					m.shown[parts[1]+" "+dims[metrics.DimFunction]+" "+o] = true
				}
			}
		}
	}
}

// emitted reports whether the code emits metric name under exactly dims,
// noting why not.
func (m *metricCheck) emitted(where, name string, dims map[string]string) bool {
	i := slices.IndexFunc(m.defs, func(d metrics.Definition) bool { return string(d.Name) == name })
	if i < 0 {
		m.fail("%s names metric %s/%s, which the code does not emit", where, metrics.Namespace, name)
		return false
	}
	d := m.defs[i]
	fn, hasFn := dims[metrics.DimFunction]
	op, hasOp := dims[metrics.DimOperation]
	outcome, hasOutcome := dims[metrics.DimOutcome]
	// The sets the code emits: {Function}, and by operation {Function,
	// Operation} and {Function, Operation, Outcome}.
	set := hasFn && (len(dims) == 1 || len(dims) == 2 && hasOp || len(dims) == 3 && hasOp && hasOutcome)
	switch {
	case !set:
		sets := "{" + metrics.DimFunction + "}"
		if d.ByOutcome {
			sets += ", {" + metrics.DimFunction + ", " + metrics.DimOperation + "} and {" +
				metrics.DimFunction + ", " + metrics.DimOperation + ", " + metrics.DimOutcome + "}"
		}
		m.fail("%s: %s with dimensions %v; the code emits it under %s", where, name, dims, sets)
	case !slices.Contains(d.Functions, fn):
		m.fail("%s: %s with Function=%s; the code emits it from %v", where, name, fn, d.Functions)
	case hasOp && !d.ByOutcome:
		m.fail("%s: %s with an Operation; the code emits it without", where, name)
	case hasOp && !slices.Contains(m.operations[fn], metrics.Operation(op)):
		m.fail("%s: %s with Operation=%s; Function=%s has the operations %v", where, name, op, fn, m.operations[fn])
	case hasOutcome && !slices.Contains(m.outcomes[fn], metrics.Outcome(outcome)):
		m.fail("%s: %s with Outcome=%s; Function=%s has the outcomes %v", where, name, outcome, fn, m.outcomes[fn])
	default:
		return true
	}
	return false
}

func (c *checker) equal(what string, got, want any) {
	if !reflect.DeepEqual(got, want) {
		c.fail("%s: template has %s, code has %s", what, show(got), show(want))
	}
}

func show(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func keySchema(ks []ddbtypes.KeySchemaElement) []any {
	out := make([]any, len(ks))
	for i, k := range ks {
		out[i] = map[string]any{"AttributeName": aws.ToString(k.AttributeName), "KeyType": string(k.KeyType)}
	}
	return out
}

// sortByName orders a list of objects by their member field, so that
// lists whose order does not matter compare equal.
func sortByName(v any, field string) []any {
	out := slices.Clone(asList(v))
	slices.SortFunc(out, func(a, b any) int {
		return strings.Compare(fmt.Sprint(asMap(a)[field]), fmt.Sprint(asMap(b)[field]))
	})
	return out
}

func toAny[T any](s []T) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

func asMap(v any) map[string]any { m, _ := v.(map[string]any); return m }
func asList(v any) []any         { l, _ := v.([]any); return l }

func seconds(d interface{ Seconds() float64 }) string {
	return strconv.Itoa(int(d.Seconds()))
}

func getAtt(id, attr string) any { return map[string]any{"Fn::GetAtt": []any{id, attr}} }

// createdQueues runs queue.Create against a recorder and returns the
// attributes it set on each queue, by name.
func createdQueues() (map[string]map[string]string, error) {
	r := &queueRecorder{created: map[string]map[string]string{}}
	if _, err := queue.Create(context.Background(), r, "q"); err != nil {
		return nil, err
	}
	return r.created, nil
}

type queueRecorder struct {
	queue.API
	created map[string]map[string]string
}

func fakeARN(name string) string { return "arn:aws:sqs:us-east-1:000000000000:" + name }

func (r *queueRecorder) CreateQueue(_ context.Context, in *sqs.CreateQueueInput, _ ...func(*sqs.Options)) (*sqs.CreateQueueOutput, error) {
	name := aws.ToString(in.QueueName)
	r.created[name] = maps.Clone(in.Attributes)
	return &sqs.CreateQueueOutput{QueueUrl: aws.String("https://sqs.local/000000000000/" + name)}, nil
}

func (r *queueRecorder) GetQueueAttributes(_ context.Context, in *sqs.GetQueueAttributesInput, _ ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	name := aws.ToString(in.QueueUrl)[strings.LastIndex(aws.ToString(in.QueueUrl), "/")+1:]
	return &sqs.GetQueueAttributesOutput{Attributes: map[string]string{string(sqstypes.QueueAttributeNameQueueArn): fakeARN(name)}}, nil
}

// parseTemplate reads a CloudFormation template into maps, lists and
// scalars, turning the short-form intrinsic functions (!Ref, !GetAtt,
// !Sub, ...) into their long form ({"Ref": ...}, {"Fn::GetAtt": [...]}).
func parseTemplate(src string) (map[string]any, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
		return nil, fmt.Errorf("template: %w", err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, fmt.Errorf("template: not one YAML document")
	}
	v, err := fromNode(doc.Content[0])
	if err != nil {
		return nil, err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("template: not a mapping")
	}
	return m, nil
}

func fromNode(n *yaml.Node) (any, error) {
	// Custom tags have one "!"; the resolved YAML ones ("!!str") two.
	if fn, ok := strings.CutPrefix(n.Tag, "!"); ok && !strings.HasPrefix(fn, "!") {
		plain := *n
		plain.Tag = ""
		arg, err := fromNode(&plain)
		if err != nil {
			return nil, err
		}
		switch {
		case fn == "Ref":
			return map[string]any{"Ref": arg}, nil
		case fn == "GetAtt" && n.Kind == yaml.ScalarNode:
			id, attr, _ := strings.Cut(n.Value, ".")
			return map[string]any{"Fn::GetAtt": []any{id, attr}}, nil
		default:
			return map[string]any{"Fn::" + fn: arg}, nil
		}
	}
	switch n.Kind {
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			v, err := fromNode(n.Content[i+1])
			if err != nil {
				return nil, err
			}
			m[n.Content[i].Value] = v
		}
		return m, nil
	case yaml.SequenceNode:
		l := make([]any, len(n.Content))
		for i, c := range n.Content {
			v, err := fromNode(c)
			if err != nil {
				return nil, err
			}
			l[i] = v
		}
		return l, nil
	case yaml.AliasNode:
		return fromNode(n.Alias)
	default:
		var v any
		if err := n.Decode(&v); err != nil {
			return nil, fmt.Errorf("template line %d: %w", n.Line, err)
		}
		return v, nil
	}
}

// TestCheckCatchesAGrantTheCodeNeeds (review 14) drops one action of
// ChargeFunction's TenantLimits statement at a time. Its code builds each
// request on the limits table, so a role without it is denied. The limits
// fail open: a denied GetItem, say, would go unnoticed in production.
func TestCheckCatchesAGrantTheCodeNeeds(t *testing.T) {
	t.Parallel()
	orig := readTemplate(t)
	const stmt = "                Action:\n                  - dynamodb:UpdateItem\n                  - dynamodb:GetItem\n                  - dynamodb:Query\n                Resource: !GetAtt LimitsTable.Arn"
	for _, action := range []string{"dynamodb:GetItem", "dynamodb:UpdateItem"} {
		if strings.Count(orig, stmt) != 1 {
			t.Fatalf("template.yaml holds %q %d times, want once: update this test", stmt, strings.Count(orig, stmt))
		}
		problems, err := check(strings.Replace(orig, stmt, strings.Replace(stmt, "                  - "+action+"\n", "", 1), 1), currentCode())
		if err != nil {
			t.Fatal(err)
		}
		if len(problems) == 0 {
			t.Errorf("ChargeFunction's TenantLimits without %s, which limit.Table builds: went unnoticed", action)
		}
	}
}
