package rdb

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// MaxLatencyKinds is how many kinds one worker tracks per minute in the
// latency histograms; jobs of further kinds count in the queue's histograms
// and in the field LatencyUntracked, not per kind.
const MaxLatencyKinds = 32

// The fields of a latency hash (see [Keys.Latency]) start with one of
// these letters and a colon, except LatencyUntracked.
const (
	LatencyWait = 'w' // "w:<bucket>" (the queue's) or "w:<bucket>:<kind>": jobs whose wait fell in bucket
	LatencyRun  = 'r' // "r:<bucket>" or "r:<bucket>:<kind>": handler runs whose run time fell in bucket
	LatencyOK   = 'p' // "p:<kind>": handler runs of kind that returned nil
	LatencyFail = 'f' // "f:<kind>": handler runs of kind that returned an error
	// LatencyUntracked is the field counting the handler runs of kinds over
	// MaxLatencyKinds.
	LatencyUntracked = "x"
)

// Latency returns the key of the wait and run time histograms of one minute
// (Unix seconds / 60): a hash whose fields are named by [LatencyField],
// written by the workers (HINCRBY, kept StatsTTL like the throughput
// counters).
func (k Keys) Latency(minute int64) string {
	return k.base + "stats:lat:" + strconv.FormatInt(minute, 10)
}

// LatencyHour returns the key of the histograms of one hour (Unix seconds /
// 3600): the sums of its minutes' hashes, fields as in [Keys.Latency],
// written by inspect's RollUp.
func (k Keys) LatencyHour(hour int64) string {
	return k.base + "stats:lat:hour:" + strconv.FormatInt(hour, 10)
}

// LatencyField returns the name of a histogram field of a latency hash:
// typ is LatencyWait or LatencyRun; kind is ignored unless perKind.
func LatencyField(typ byte, bucket int, kind string, perKind bool) string {
	f := string(typ) + ":" + strconv.Itoa(bucket)
	if perKind {
		f += ":" + kind
	}
	return f
}

// LatencyCountField returns the field of the successes (LatencyOK) or
// failures (LatencyFail) of kind.
func LatencyCountField(typ byte, kind string) string { return string(typ) + ":" + kind }

// LatencyEntry is one field of a latency hash, parsed.
type LatencyEntry struct {
	Type    byte // LatencyWait, LatencyRun, LatencyOK or LatencyFail; 'x' for LatencyUntracked
	Bucket  int  // for LatencyWait and LatencyRun
	Kind    string
	PerKind bool // Kind is set (always for LatencyOK and LatencyFail)
}

// ParseLatencyField parses a field of a latency hash; ok is false for a
// field of no known form.
func ParseLatencyField(f string) (e LatencyEntry, ok bool) {
	if f == LatencyUntracked {
		return LatencyEntry{Type: 'x'}, true
	}
	if len(f) < 2 || f[1] != ':' {
		return e, false
	}
	e.Type, f = f[0], f[2:]
	switch e.Type {
	case LatencyOK, LatencyFail:
		e.Kind, e.PerKind = f, true
		return e, true
	case LatencyWait, LatencyRun:
		b, kind, per := strings.Cut(f, ":")
		n, err := strconv.Atoi(b)
		if err != nil || n < 0 {
			return e, false
		}
		e.Bucket, e.Kind, e.PerKind = n, kind, per
		return e, true
	}
	return e, false
}

// addLatency queues, on pipe, the addition of lat (minute -> field ->
// count) to the latency hashes, with their expiry.
func (k *Keys) addLatency(ctx context.Context, pipe redis.Pipeliner, lat map[int64]map[string]int64) {
	for m, fields := range lat {
		if len(fields) == 0 {
			continue
		}
		key := k.Latency(m)
		for f, n := range fields {
			pipe.HIncrBy(ctx, key, f, n)
		}
		pipe.Expire(ctx, key, StatsTTL*time.Second)
	}
}
