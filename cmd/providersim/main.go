package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/chargeonce/chargeonce/internal/provider/providersim"
)

// envSecret names the environment variable -secret defaults to.
const envSecret = "PROVIDER_SECRET"

// shutdownTimeout bounds how long in-flight requests may finish on shutdown.
const shutdownTimeout = 10 * time.Second

func main() {
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, logger)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		logger.Error("providersim stopped", slog.String("err", err.Error()))
		os.Exit(1)
	}
}

type config struct {
	addr   string
	secret string
	slow   time.Duration
}

func run(ctx context.Context, args []string, getenv func(string) string, logger *slog.Logger) error {
	cfg, err := parseConfig(args, getenv, os.Stderr)
	if err != nil {
		return err
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", cfg.addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	sim := providersim.New(
		providersim.WithSecret(cfg.secret),
		providersim.WithSlowDelay(cfg.slow),
		providersim.WithLogger(logger),
	)
	return serve(ctx, ln, sim, logger)
}

func parseConfig(args []string, getenv func(string) string, output io.Writer) (config, error) {
	fs := flag.NewFlagSet("providersim", flag.ContinueOnError)
	fs.SetOutput(output)
	var cfg config
	fs.StringVar(&cfg.addr, "addr", "127.0.0.1:4010", "listen address")
	// The default is applied after parsing so that -h never prints the secret.
	fs.StringVar(&cfg.secret, "secret", "", "bearer token every request must carry (default $"+envSecret+"; empty accepts all)")
	fs.DurationVar(&cfg.slow, "slow", providersim.DefaultSlowDelay, "delay of slow charges")
	if err := fs.Parse(args); err != nil {
		return config{}, fmt.Errorf("parse flags: %w", err)
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if cfg.slow < 0 {
		return config{}, fmt.Errorf("-slow %s: must not be negative", cfg.slow)
	}
	secretSet := false
	fs.Visit(func(f *flag.Flag) { secretSet = secretSet || f.Name == "secret" })
	if !secretSet {
		cfg.secret = getenv(envSecret)
	}
	return cfg, nil
}

// serve serves h on ln until ctx ends, then shuts down gracefully.
func serve(ctx context.Context, ln net.Listener, h http.Handler, logger *slog.Logger) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       time.Minute,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	logger.Info("listening", slog.String("addr", ln.Addr().String()))

	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	logger.Info("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}
