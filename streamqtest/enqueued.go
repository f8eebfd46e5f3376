package streamqtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/wire"
)

const (
	// MaxListed is the most jobs [Enqueued] reads from a queue (its stream
	// and its delayed set together); a test queue holding more fails the
	// test.
	MaxListed = 10_000
	// listChunk is the most entries one read asks for.
	listChunk = 500
	// DefaultDueWithin is the tolerance of Want.DueAt when Want.DueWithin
	// is 0.
	DefaultDueWithin = time.Second
	// shownPayload is the most payload bytes a failure message shows.
	shownPayload = 100
)

// EnqueuedJob is a job waiting or running in a queue, as [Enqueued] lists
// it.
type EnqueuedJob struct {
	// ID is the job's ID: its stream entry ID, or for a scheduled job its
	// ID in the delayed set (what Producer.Enqueue returned).
	ID      string
	Payload []byte
	Headers map[string]string
	// Key is the job's unique key ("" without one).
	Key        string
	EnqueuedAt time.Time
	// Attempt counts the attempts charged to the job so far (0 for a job
	// that never failed).
	Attempt int
	// Scheduled is true for a job in the delayed set (enqueued with
	// streamq.ProcessAt or ProcessIn, or waiting for a retry), due at DueAt.
	Scheduled bool
	DueAt     time.Time
	// Pending is true for a stream entry delivered to a consumer of the
	// queue's group and not acknowledged yet (running, or abandoned by a
	// crashed consumer).
	Pending bool
	// Err is set when the job's fields do not follow the wire format (a
	// consumer dead-letters it); the fields above hold what could be read.
	Err error
}

// String describes the job on one line, as failure messages show it.
func (j EnqueuedJob) String() string {
	var b strings.Builder
	b.WriteString(j.ID)
	switch {
	case j.Scheduled:
		fmt.Fprintf(&b, " scheduled at %s", j.DueAt.Format(time.RFC3339Nano))
	case j.Pending:
		b.WriteString(" pending")
	default:
		b.WriteString(" ready")
	}
	fmt.Fprintf(&b, " payload=%s", showPayload(j.Payload))
	if len(j.Headers) > 0 {
		fmt.Fprintf(&b, " headers=%v", j.Headers)
	}
	if j.Key != "" {
		fmt.Fprintf(&b, " key=%q", j.Key)
	}
	if j.Attempt > 0 {
		fmt.Fprintf(&b, " attempt=%d", j.Attempt)
	}
	if j.Err != nil {
		fmt.Fprintf(&b, " malformed: %v", j.Err)
	}
	return b.String()
}

// Want describes an expected job for [RequireEnqueued]. Every field is
// optional; a job matches when it matches every field that is set.
type Want struct {
	// Payload, if not nil, must equal the job's payload.
	Payload []byte
	// Headers must all be among the job's headers, with these values (the
	// job may have more, such as a trace context).
	Headers map[string]string
	// Key, if set, must be the job's unique key.
	Key string
	// Scheduled requires the job to be in the delayed set.
	Scheduled bool
	// DueAt, if set, requires the job to be scheduled, due within
	// DueWithin of DueAt.
	DueAt time.Time
	// DueWithin is the tolerance of DueAt. Defaults to DefaultDueWithin.
	DueWithin time.Duration
	// Match, if set, is one more condition.
	Match func(EnqueuedJob) bool
}

// String describes what w requires, as failure messages show it.
func (w Want) String() string {
	var parts []string
	if w.Payload != nil {
		parts = append(parts, "payload="+showPayload(w.Payload))
	}
	if len(w.Headers) > 0 {
		parts = append(parts, fmt.Sprintf("headers⊇%v", w.Headers))
	}
	if w.Key != "" {
		parts = append(parts, fmt.Sprintf("key=%q", w.Key))
	}
	if !w.DueAt.IsZero() {
		parts = append(parts, fmt.Sprintf("scheduled at %s ±%s", w.DueAt.Format(time.RFC3339Nano), w.dueWithin()))
	} else if w.Scheduled {
		parts = append(parts, "scheduled")
	}
	if w.Match != nil {
		parts = append(parts, "Match")
	}
	if len(parts) == 0 {
		return "{any job}"
	}
	return "{" + strings.Join(parts, " ") + "}"
}

func (w Want) dueWithin() time.Duration {
	if w.DueWithin > 0 {
		return w.DueWithin
	}
	return DefaultDueWithin
}

// matches reports whether j is a job w describes.
func (w Want) matches(j EnqueuedJob) bool {
	if w.Payload != nil && !bytes.Equal(w.Payload, j.Payload) {
		return false
	}
	for k, v := range w.Headers {
		if got, ok := j.Headers[k]; !ok || got != v {
			return false
		}
	}
	if w.Key != "" && w.Key != j.Key {
		return false
	}
	if (w.Scheduled || !w.DueAt.IsZero()) && !j.Scheduled {
		return false
	}
	if !w.DueAt.IsZero() && (j.DueAt.Sub(w.DueAt)).Abs() > w.dueWithin() {
		return false
	}
	return w.Match == nil || w.Match(j)
}

// Enqueued returns the jobs waiting or running in q: the stream entries its
// consumer group has not acknowledged (every entry if the group does not
// exist yet), in stream order, then the scheduled jobs of its delayed set,
// by due time. Acknowledged history still in the stream is left out. A
// Redis error, or a queue with more than MaxListed jobs, fails the test.
func Enqueued(ctx context.Context, tb testing.TB, q *streamq.Queue) []EnqueuedJob {
	tb.Helper()
	jobs, err := list(ctx, q)
	if err != nil {
		tb.Fatalf("streamqtest: listing the jobs of queue %q: %v", q.Name(), err)
	}
	return jobs
}

// RequireEnqueued fails the test unless q holds a distinct job for each of
// want (in any order; a job matches one want at most), and returns those
// jobs in the order of want. With no want it requires at least one job. The
// failure message shows the wants nothing matched and every job found.
func RequireEnqueued(ctx context.Context, tb testing.TB, q *streamq.Queue, want ...Want) []EnqueuedJob {
	tb.Helper()
	jobs := Enqueued(ctx, tb, q)
	if len(want) == 0 {
		if len(jobs) == 0 {
			tb.Fatalf("streamqtest: queue %q holds no job, want at least one", q.Name())
		}
		return nil
	}
	assign, missing := match(want, jobs)
	if len(missing) > 0 {
		var b strings.Builder
		fmt.Fprintf(&b, "streamqtest: queue %q: ", q.Name())
		for i, w := range missing {
			if i > 0 {
				b.WriteString("; ")
			}
			fmt.Fprintf(&b, "no job matches want[%d] %v", w, want[w])
		}
		if len(missing) < len(want) && len(want) > 1 {
			b.WriteString(" (each job matches one want at most)")
		}
		b.WriteString("\n")
		b.WriteString(describe(jobs))
		tb.Fatalf("%s", b.String())
	}
	out := make([]EnqueuedJob, len(want))
	for i, j := range assign {
		out[i] = jobs[j]
	}
	return out
}

// RequireEnqueuedN fails the test unless q holds exactly n jobs (see
// [Enqueued]), and returns them. The failure message shows the jobs found.
func RequireEnqueuedN(ctx context.Context, tb testing.TB, q *streamq.Queue, n int) []EnqueuedJob {
	tb.Helper()
	jobs := Enqueued(ctx, tb, q)
	if len(jobs) != n {
		tb.Fatalf("streamqtest: queue %q holds %d jobs, want %d\n%s", q.Name(), len(jobs), n, describe(jobs))
	}
	return jobs
}

// RequireNotEnqueued fails the test if a job of q matches want, and shows
// the jobs that do.
func RequireNotEnqueued(ctx context.Context, tb testing.TB, q *streamq.Queue, want Want) {
	tb.Helper()
	var found []EnqueuedJob
	for _, j := range Enqueued(ctx, tb, q) {
		if want.matches(j) {
			found = append(found, j)
		}
	}
	if len(found) > 0 {
		tb.Fatalf("streamqtest: queue %q: want no job matching %v, %s", q.Name(), want, describe(found))
	}
}

// match assigns a distinct job to every want it can (a maximum bipartite
// matching, so that a loose want cannot take the only job a strict one
// matches). It returns the job index of each want, and the wants left
// without one.
func match(want []Want, jobs []EnqueuedJob) (assign []int, missing []int) {
	ok := make([][]int, len(want)) // the jobs each want matches
	for i, w := range want {
		for j := range jobs {
			if w.matches(jobs[j]) {
				ok[i] = append(ok[i], j)
			}
		}
	}
	owner := make([]int, len(jobs)) // want of each job, -1 for none
	for j := range owner {
		owner[j] = -1
	}
	var try func(w int, seen []bool) bool
	try = func(w int, seen []bool) bool {
		for _, j := range ok[w] {
			if seen[j] {
				continue
			}
			seen[j] = true
			if owner[j] < 0 || try(owner[j], seen) {
				owner[j] = w
				return true
			}
		}
		return false
	}
	for w := range want {
		if !try(w, make([]bool, len(jobs))) {
			missing = append(missing, w)
		}
	}
	assign = make([]int, len(want))
	for j, w := range owner {
		if w >= 0 {
			assign[w] = j
		}
	}
	return assign, missing
}

// describe lists jobs for a failure message.
func describe(jobs []EnqueuedJob) string {
	if len(jobs) == 0 {
		return "found no job"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "found %d:", len(jobs))
	for _, j := range jobs {
		b.WriteString("\n  ")
		b.WriteString(j.String())
	}
	return b.String()
}

func showPayload(p []byte) string {
	if len(p) > shownPayload {
		return strconv.Quote(string(p[:shownPayload])) + fmt.Sprintf("... (%d bytes)", len(p))
	}
	return strconv.Quote(string(p))
}

// list reads the jobs of q.
func list(ctx context.Context, q *streamq.Queue) ([]EnqueuedJob, error) {
	cq := core.Of(q)
	jobs, err := listStream(ctx, cq)
	if err != nil {
		return nil, err
	}
	delayed, err := listDelayed(ctx, cq, MaxListed-len(jobs))
	if err != nil {
		return nil, err
	}
	return append(jobs, delayed...), nil
}

// listStream reads the stream entries the group has not acknowledged.
func listStream(ctx context.Context, q *core.Queue) ([]EnqueuedJob, error) {
	last, pending, err := groupState(ctx, q)
	if err != nil {
		return nil, err
	}
	var jobs []EnqueuedJob
	start := "-"
	for read := 0; ; {
		entries, err := q.RDB.XRangeN(ctx, q.Keys.Stream, start, "+", listChunk).Result()
		if err != nil {
			return nil, fmt.Errorf("XRANGE %s: %w", q.Keys.Stream, err)
		}
		for _, e := range entries {
			if read++; read > 4*MaxListed {
				return nil, fmt.Errorf("the stream %s holds more than %d entries: streamqtest reads small test queues", q.Keys.Stream, 4*MaxListed)
			}
			_, isPending := pending[e.ID]
			if last != "" && !isPending && !after(e.ID, last) {
				continue // acknowledged history
			}
			if len(jobs) == MaxListed {
				return nil, fmt.Errorf("queue %s holds more than %d jobs: streamqtest lists small test queues", q.Name, MaxListed)
			}
			j := decode(e.ID, e.Values)
			j.Pending = isPending
			jobs = append(jobs, j)
		}
		if len(entries) < listChunk {
			return jobs, nil
		}
		start = "(" + entries[len(entries)-1].ID
	}
}

// groupState returns the group's last delivered ID ("" when the group does
// not exist: nothing was delivered) and its pending entries.
func groupState(ctx context.Context, q *core.Queue) (string, map[string]struct{}, error) {
	groups, err := q.RDB.XInfoGroups(ctx, q.Keys.Stream).Result()
	if err != nil {
		if rdb.IsNoSuchKey(err) || errors.Is(err, redis.Nil) {
			return "", nil, nil
		}
		return "", nil, fmt.Errorf("XINFO GROUPS %s: %w", q.Keys.Stream, err)
	}
	i := slices.IndexFunc(groups, func(g redis.XInfoGroup) bool { return g.Name == q.Group })
	if i < 0 {
		return "", nil, nil
	}
	pending := map[string]struct{}{}
	if groups[i].Pending == 0 {
		return groups[i].LastDeliveredID, pending, nil
	}
	if groups[i].Pending > MaxListed {
		return "", nil, fmt.Errorf("queue %s has %d pending jobs: streamqtest lists small test queues", q.Name, groups[i].Pending)
	}
	ps, err := q.RDB.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: q.Keys.Stream, Group: q.Group, Start: "-", End: "+", Count: MaxListed}).Result()
	if err != nil {
		return "", nil, fmt.Errorf("XPENDING %s: %w", q.Keys.Stream, err)
	}
	for _, p := range ps {
		pending[p.ID] = struct{}{}
	}
	return groups[i].LastDeliveredID, pending, nil
}

// after reports whether stream ID a is after b.
func after(a, b string) bool {
	am, as := splitID(a)
	bm, bs := splitID(b)
	return am > bm || am == bm && as > bs
}

func splitID(id string) (ms, seq uint64) {
	m, s, _ := strings.Cut(id, "-")
	ms, _ = strconv.ParseUint(m, 10, 64)
	seq, _ = strconv.ParseUint(s, 10, 64)
	return ms, seq
}

// listDelayed reads up to limit jobs of the delayed set, by due time.
func listDelayed(ctx context.Context, q *core.Queue, limit int) ([]EnqueuedJob, error) {
	n, err := q.RDB.ZCard(ctx, q.Keys.Delayed).Result()
	if err != nil {
		return nil, fmt.Errorf("ZCARD %s: %w", q.Keys.Delayed, err)
	}
	if n > int64(limit) {
		return nil, fmt.Errorf("queue %s holds more than %d jobs: streamqtest lists small test queues", q.Name, MaxListed)
	}
	var jobs []EnqueuedJob
	for start := int64(0); start < n; start += listChunk {
		zs, err := q.RDB.ZRangeWithScores(ctx, q.Keys.Delayed, start, start+listChunk-1).Result()
		if err != nil {
			return nil, fmt.Errorf("ZRANGE %s: %w", q.Keys.Delayed, err)
		}
		if len(zs) == 0 {
			break
		}
		ids := make([]string, len(zs))
		for i, z := range zs {
			ids[i], _ = z.Member.(string)
		}
		data, err := q.RDB.HMGet(ctx, q.Keys.DelayedJobs, ids...).Result()
		if err != nil {
			return nil, fmt.Errorf("HMGET %s: %w", q.Keys.DelayedJobs, err)
		}
		for i, z := range zs {
			var j EnqueuedJob
			packed, ok := data[i].(string)
			fields, err := wire.Unpack(packed)
			switch {
			case !ok:
				j = EnqueuedJob{ID: ids[i], Err: fmt.Errorf("%w: no data in %s", streamq.ErrMalformed, q.Keys.DelayedJobs)}
			case err != nil:
				j = EnqueuedJob{ID: ids[i], Err: err}
			default:
				j = decode(ids[i], fields)
			}
			j.Scheduled = true
			j.DueAt = time.UnixMilli(int64(z.Score))
			jobs = append(jobs, j)
		}
	}
	return jobs, nil
}

// decode turns wire fields into an EnqueuedJob.
func decode(id string, fields map[string]any) EnqueuedJob {
	wj, err := wire.Decode(fields)
	j := EnqueuedJob{ID: id, Payload: wj.Payload, Headers: maps.Clone(wj.Headers), Key: wj.Key, Attempt: wj.Attempt, Err: err}
	if wj.EnqMillis > 0 {
		j.EnqueuedAt = time.UnixMilli(wj.EnqMillis)
	}
	return j
}
