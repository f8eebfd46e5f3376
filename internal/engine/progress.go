package engine

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/streamq/streamq/internal/pool"
	"github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/wire"
)

// Limits of progress and results.
const (
	// MaxProgressMessage bounds the message of a progress report (bytes).
	MaxProgressMessage = 256
)

// ErrNotHandler is returned by [SetProgress] and [SetResult] when ctx is
// not (derived from) the context of a running handler.
var ErrNotHandler = errors.New("streamq: ctx is not a handler's context: pass the ctx the handler got (or one derived from it)")

// cfgKey is the context key of a run's *Config, in the contexts of its
// jobs.
type cfgKey struct{}

// jobRef is how a handler's context leads back to its job.
type jobRef interface {
	jobID() string
	ownRetention() time.Duration
}

func (s *slot[F]) jobID() string { return stableID(&s.d) }

// ownRetention returns the job's own result retention (0: the queue's),
// read from its fields: set before its handler runs, and never changed
// after, so any goroutine of the handler may read them.
func (s *slot[F]) ownRetention() time.Duration {
	return time.Duration(wire.RetentionField(s.d.Fields)) * time.Millisecond
}

// handlerJob is what SetProgress and SetResult need of the job whose
// handler runs with a context.
type handlerJob struct {
	cfg       *Config
	id        string
	retention time.Duration // the job's own, else the queue's
}

// current returns the job whose handler runs with ctx.
func current(ctx context.Context) (handlerJob, bool) {
	ref, ok := ctx.Value(pool.ValKey{}).(jobRef)
	if !ok {
		return handlerJob{}, false
	}
	cfg, ok := ctx.Value(cfgKey{}).(*Config)
	if !ok || cfg.DB == nil {
		return handlerJob{}, false
	}
	h := handlerJob{cfg: cfg, id: ref.jobID(), retention: ref.ownRetention()}
	if h.retention == 0 {
		h.retention = cfg.ResultRetention
	}
	return h, true
}

// SetProgress records the progress of the job whose handler runs with ctx:
// percent from 0 to 100 and a short message, kept for ResultRetention.
func SetProgress(ctx context.Context, percent int, msg string) error {
	hj, ok := current(ctx)
	if !ok {
		return ErrNotHandler
	}
	cfg, id := hj.cfg, hj.id
	if percent < 0 || percent > 100 {
		return fmt.Errorf("streamq: progress %d is out of range: use 0 to 100", percent)
	}
	if len(msg) > MaxProgressMessage {
		return fmt.Errorf("%w: the progress message is %d bytes, the limit is %d", wire.ErrTooLarge, len(msg), MaxProgressMessage)
	}
	if !utf8.ValidString(msg) {
		return fmt.Errorf("%w: the progress message is not valid UTF-8", wire.ErrInvalidHeader)
	}
	p := rdb.ProgressParams{JobID: id, Percent: percent, Message: msg, Retention: hj.retention}
	if err := cfg.DB.SetProgress(ctx, p); err != nil {
		return fmt.Errorf("streamq: set progress of job %s: %w", id, err)
	}
	return nil
}

// SetResult records the result of the job whose handler runs with ctx, kept
// for ResultRetention; it must be at most MaxResultBytes.
func SetResult(ctx context.Context, result []byte) error {
	hj, ok := current(ctx)
	if !ok {
		return ErrNotHandler
	}
	cfg, id := hj.cfg, hj.id
	if cfg.MaxResultBytes >= 0 && int64(len(result)) > cfg.MaxResultBytes {
		return fmt.Errorf("%w: the result is %d bytes, the limit is %d (MaxResultBytes): store large results elsewhere and record a reference",
			wire.ErrTooLarge, len(result), cfg.MaxResultBytes)
	}
	if err := cfg.DB.SetResult(ctx, rdb.ResultParams{JobID: id, Result: result, Retention: hj.retention}); err != nil {
		return fmt.Errorf("streamq: set result of job %s: %w", id, err)
	}
	return nil
}
