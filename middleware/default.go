package middleware

import (
	"log/slog"
	"time"

	"github.com/streamq/streamq"
)

// DefaultConfig configures [Default]. The zero value is valid: Recover,
// tracing with the OpenTelemetry globals, and logging of failures to
// slog.Default().
type DefaultConfig struct {
	// Logger receives the Logging records. Defaults to slog.Default().
	Logger *slog.Logger

	// Logging configures Logging. Defaults to nil (the LoggingConfig zero
	// value).
	Logging *LoggingConfig

	// Tracing configures Tracing. Defaults to nil (the TracingConfig zero
	// value: the global tracer provider and propagator).
	Tracing *TracingConfig

	// NoTracing leaves Tracing out. Defaults to false.
	NoTracing bool

	// Metrics, if set, adds Metrics.Middleware. Remember to also set
	// ConsumerConfig.OnEvent to Metrics.OnEvent. Defaults to nil (no metrics).
	Metrics *Metrics

	// RateLimiter, if set, adds RateLimiter.Middleware. Defaults to nil (no
	// rate limit).
	RateLimiter *RateLimiter

	// Timeout, if positive, adds Timeout(Timeout). Defaults to 0 (only the
	// consumer's JobTimeout applies).
	Timeout time.Duration
}

// Default returns the recommended chain for ConsumerConfig.Middleware, in the
// order explained in the package documentation:
//
//	Recover, Tracing, Metrics, Logging, RateLimit, Timeout
//
// leaving out what cfg does not ask for. cfg may be nil.
func Default(cfg *DefaultConfig) []streamq.Middleware {
	var c DefaultConfig
	if cfg != nil {
		c = *cfg
	}
	mws := make([]streamq.Middleware, 0, 6)
	mws = append(mws, Recover())
	if !c.NoTracing {
		mws = append(mws, Tracing(c.Tracing))
	}
	if c.Metrics != nil {
		mws = append(mws, c.Metrics.Middleware())
	}
	mws = append(mws, Logging(c.Logger, c.Logging))
	if c.RateLimiter != nil {
		mws = append(mws, c.RateLimiter.Middleware())
	}
	if c.Timeout > 0 {
		mws = append(mws, Timeout(c.Timeout))
	}
	return mws
}
