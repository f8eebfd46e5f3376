package rdb

import (
	"context"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// queueFullPrefix starts the error reply of a script that refused jobs
// because the queue is at its cap.
const queueFullPrefix = "QUEUEFULL"

// ErrQueueFull is what [Translate] makes of a QUEUEFULL reply. The root
// package exports the same value as streamq.ErrQueueFull.
var ErrQueueFull = errors.New("streamq: queue full: MaxLen jobs are not acknowledged yet")

// ErrPaused is the refusal of a call that would hand a worker jobs to start
// (a read, a takeover, a pop) while the queue is paused. The engine waits
// for the resume; it never reaches users.
var ErrPaused = errors.New("streamq: queue paused")

// Translate turns a script's QUEUEFULL error reply into an error wrapping
// [ErrQueueFull] with the script's detail; other errors are returned as
// they are.
func Translate(err error) error {
	if err == nil || !redis.HasErrorPrefix(err, queueFullPrefix) {
		return err
	}
	return &queueFullError{detail: strings.TrimSpace(strings.TrimPrefix(err.Error(), queueFullPrefix))}
}

type queueFullError struct{ detail string }

func (e *queueFullError) Error() string { return ErrQueueFull.Error() + " (" + e.detail + ")" }
func (e *queueFullError) Unwrap() error { return ErrQueueFull }

// IsBusyGroup reports the reply of XGROUP CREATE for a group that exists.
func IsBusyGroup(err error) bool { return redis.HasErrorPrefix(err, "BUSYGROUP") }

// IsNoGroup reports a command on a group (or stream) that does not exist.
func IsNoGroup(err error) bool { return redis.HasErrorPrefix(err, "NOGROUP") }

// IsNoSuchKey reports XINFO on a stream that does not exist.
func IsNoSuchKey(err error) bool {
	return err != nil && strings.Contains(err.Error(), "no such key")
}

// Fatal reports Redis errors that retrying cannot fix: a wrong key type,
// missing permissions or authentication, an unknown command. A permission
// denied to a command inside a script is reported by Redis 7 as "ERR The
// user executing the script can't run this command ..." (or "... can't
// access at least one of the keys ..."), and by Valkey 8 as "ERR ACL
// failure in script: User ... has no permissions ...", not as NOPERM: it
// is fatal too.
func Fatal(err error) bool {
	// HasErrorPrefix drops a leading "ERR ", so "unknown command" matches
	// "ERR unknown command ...".
	for _, p := range []string{"WRONGTYPE", "NOPERM", "WRONGPASS", "NOAUTH", "unknown command", "The user executing the script can't", "ACL failure in script"} {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}

// EvictionPolicy returns the server's maxmemory-policy, read from INFO
// memory (which managed services allow more often than CONFIG GET).
func EvictionPolicy(ctx context.Context, c redis.UniversalClient) (string, error) {
	info, err := c.Info(ctx, "memory").Result()
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(line, "maxmemory_policy:"); ok {
			return strings.TrimSpace(v), nil
		}
	}
	return "", nil
}

// IsOOM reports a write refused because Redis is at maxmemory.
func IsOOM(err error) bool { return redis.HasErrorPrefix(err, "OOM") }
