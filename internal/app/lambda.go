package app

import (
	"context"
	"log/slog"
	"os"

	"github.com/chargeonce/chargeonce/internal/audit"
	"github.com/chargeonce/chargeonce/internal/awsenv"
	"github.com/chargeonce/chargeonce/internal/charge/httpapi"
	"github.com/chargeonce/chargeonce/internal/intake"
	"github.com/chargeonce/chargeonce/internal/metrics"
	"github.com/chargeonce/chargeonce/internal/reconcile"
	"github.com/chargeonce/chargeonce/internal/sweeper"
	"github.com/chargeonce/chargeonce/internal/tracing"
)

// fromEnv is what every Lambda main does before lambda.Start. It reads
// the configuration and builds the AWS clients once. It starts tracing if
// the configuration names an endpoint. Then it builds the handler.
func fromEnv[C interface{ common() Common }, H any](ctx context.Context, get Getenv, function string, load func(Getenv) (C, error), build func(C, Deps) (H, error)) (H, error) {
	var zero H
	c, err := load(get)
	if err != nil {
		return zero, err
	}
	common := c.common()
	d := Deps{Clients: awsenv.FromLambdaEnv(get), Logger: Logger(common.LogLevel)}
	if common.TraceEndpoint != "" {
		if d.Tracer, err = tracing.NewOTLP(ctx, function, common.TraceEndpoint); err != nil {
			return zero, err
		}
	}
	return build(c, d)
}

// ChargeFromEnv builds the charge function's handler from its environment.
func ChargeFromEnv(ctx context.Context, get Getenv) (*httpapi.Handler, error) {
	return fromEnv(ctx, get, metrics.FunctionCharge, LoadCharge, func(c ChargeConfig, d Deps) (*httpapi.Handler, error) {
		return ChargeHandler(ctx, c, d)
	})
}

// SweeperFromEnv builds the sweeper function's handler from its environment.
func SweeperFromEnv(ctx context.Context, get Getenv) (*sweeper.Sweeper, error) {
	return fromEnv(ctx, get, metrics.FunctionSweeper, LoadSweeper, SweeperHandler)
}

// ReconcileFromEnv builds the reconcile function's handler from its
// environment.
func ReconcileFromEnv(ctx context.Context, get Getenv) (*reconcile.Handler, error) {
	return fromEnv(ctx, get, metrics.FunctionReconcile, LoadReconcile, ReconcileHandler)
}

// IntakeFromEnv builds the intake function's handler from its environment.
func IntakeFromEnv(ctx context.Context, get Getenv) (*intake.Handler, error) {
	return fromEnv(ctx, get, metrics.FunctionIntake, LoadIntake, IntakeHandler)
}

// AuditFromEnv builds the audit function's handler from its environment,
// with an S3 client for the trail's bucket.
func AuditFromEnv(ctx context.Context, get Getenv) (*audit.Handler, error) {
	return fromEnv(ctx, get, FunctionAudit, LoadAudit, func(c AuditConfig, d Deps) (*audit.Handler, error) {
		d.S3 = awsenv.S3(awsenv.LambdaConfig(get), awsenv.EndpointsFrom(get).S3)
		return AuditHandler(c, d)
	})
}

// FunctionAudit names the audit function in its spans. It emits no
// metrics of its own: Lambda's Errors and IteratorAge are its alarms.
const FunctionAudit = "audit"

// Fatal logs a function's start-up error and exits; Lambda reports it as an
// init error.
func Fatal(function string, err error) {
	Logger(slog.LevelInfo).Error(function+": cannot start", "error", err.Error())
	os.Exit(1)
}
