package app

import (
	"context"
	"log/slog"
	"os"

	"github.com/chargeonce/chargeonce/internal/awsenv"
	"github.com/chargeonce/chargeonce/internal/charge/httpapi"
	"github.com/chargeonce/chargeonce/internal/intake"
	"github.com/chargeonce/chargeonce/internal/reconcile"
	"github.com/chargeonce/chargeonce/internal/sweeper"
)

// fromEnv is what every Lambda main does before lambda.Start: read the
// configuration, build the AWS clients once, and build the handler.
func fromEnv[C, H any](ctx context.Context, get Getenv, load func(Getenv) (C, error), level func(C) slog.Level, build func(C, Deps) (H, error)) (H, error) {
	var zero H
	c, err := load(get)
	if err != nil {
		return zero, err
	}
	clients, err := awsenv.Load(ctx)
	if err != nil {
		return zero, err
	}
	return build(c, Deps{Clients: clients, Logger: Logger(level(c))})
}

// ChargeFromEnv builds the charge function's handler from its environment.
func ChargeFromEnv(ctx context.Context, get Getenv) (*httpapi.Handler, error) {
	return fromEnv(ctx, get, LoadCharge, func(c ChargeConfig) slog.Level { return c.LogLevel }, ChargeHandler)
}

// SweeperFromEnv builds the sweeper function's handler from its environment.
func SweeperFromEnv(ctx context.Context, get Getenv) (*sweeper.Sweeper, error) {
	return fromEnv(ctx, get, LoadSweeper, func(c SweeperConfig) slog.Level { return c.LogLevel }, SweeperHandler)
}

// ReconcileFromEnv builds the reconcile function's handler from its
// environment.
func ReconcileFromEnv(ctx context.Context, get Getenv) (*reconcile.Handler, error) {
	return fromEnv(ctx, get, LoadReconcile, func(c ReconcileConfig) slog.Level { return c.LogLevel }, ReconcileHandler)
}

// IntakeFromEnv builds the intake function's handler from its environment.
func IntakeFromEnv(ctx context.Context, get Getenv) (*intake.Handler, error) {
	return fromEnv(ctx, get, LoadIntake, func(c IntakeConfig) slog.Level { return c.LogLevel }, IntakeHandler)
}

// Fatal logs a function's start-up error and exits; Lambda reports it as an
// init error.
func Fatal(function string, err error) {
	Logger(slog.LevelInfo).Error(function+": cannot start", "error", err.Error())
	os.Exit(1)
}
