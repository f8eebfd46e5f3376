package inspect

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/wire"
)

// Job returns the job with stable ID (or current entry ID) id, in whichever
// state it is, with its progress and result when the handler recorded them.
// It follows the trail of a job that was retried, dead-lettered or
// requeued, then looks for id in the stream, the delayed set and the
// priority set. A job that finished is StateCompleted while the queue
// keeps its record (streamq.QueueConfig.CompletedRetention), else
// StateDone if it left a result, a done marker (a job with a chosen ID,
// see streamq.WithJobID) or its acknowledged entry. Otherwise it returns a [*NotFoundError] (errors.Is
// [ErrJobNotFound]).
//
// The IDs of different structures can be equal (a dead letter written in
// the same millisecond as a stream entry): id may name a location
// explicitly, "x:<dead-letter entry ID>", "s:<stream entry ID>",
// "d:<delayed-set member>" or "p:<priority job ID>". The control verbs
// accept the same forms.
func (q *Queue) Job(ctx context.Context, id string) (*Job, error) {
	j, err := q.locate(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("inspect: job %s of %s: %w", id, q.name, err)
	}
	stable := id
	if j != nil {
		stable = j.ID
	}
	pipe := q.rdb().Pipeline()
	prog := pipe.Get(ctx, q.keys.Progress(stable))
	res := pipe.Get(ctx, q.keys.Result(stable))
	var done *redis.IntCmd
	var rec *redis.StringCmd
	if j == nil {
		done = pipe.Exists(ctx, q.keys.Done(stable))
	}
	if q.kind != KindPriority && (j == nil || j.State == StateDone) {
		rec = pipe.HGet(ctx, q.keys.CompletedJobs(), stable)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("inspect: job %s of %s: %w", id, q.name, err)
	}
	if rec != nil && rec.Err() == nil {
		if c, ok := completedJob(stable, rec.Val()); ok {
			j = withRecord(j, c)
		}
	}
	if j == nil {
		if res.Err() != nil && done.Val() == 0 {
			return nil, &NotFoundError{What: "job", Name: id}
		}
		j = &Job{ID: id, State: StateDone}
	}
	j.Queue = q.name
	if res.Err() == nil {
		j.Result = []byte(res.Val())
	}
	if prog.Err() == nil {
		var p struct {
			Pct int    `json:"pct"`
			Msg string `json:"msg"`
			At  int64  `json:"at"`
		}
		if json.Unmarshal([]byte(prog.Val()), &p) == nil {
			j.Progress = &Progress{Percent: p.Pct, Message: p.Msg, At: time.UnixMilli(p.At)}
		}
	}
	return j, nil
}

// locate finds job id: where the trail says it is, else under id itself.
// It returns nil when it is in none of the queue's structures.
func (q *Queue) locate(ctx context.Context, id string) (*Job, error) {
	if kind, rest, ok := strings.Cut(id, ":"); ok && len(kind) == 1 && strings.Contains("sdxp", kind) {
		return q.at(ctx, kind+":"+rest) // an explicit location
	}
	loc, err := q.rdb().HGet(ctx, q.keys.Trail, id).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	if lane, ok := strings.CutPrefix(loc, rdb.TrailWaiting); ok {
		if j, err := q.asideJob(ctx, id, lane); j != nil || err != nil {
			return j, err
		}
	} else if loc != "" {
		if j, err := q.at(ctx, loc); j != nil || err != nil {
			if j != nil && j.ID == j.EntryID {
				j.ID = id
			}
			return j, err
		}
	}
	for _, kind := range q.places() {
		if j, err := q.at(ctx, kind+id); j != nil || err != nil {
			return j, err
		}
	}
	return nil, nil
}

// places are the location kinds where a job of the queue may be found under
// its own ID. Dead letters are not: their entry IDs may equal stream IDs,
// and a dead job is found by its stable ID through the trail (or by an
// explicit "x:<entry ID>").
func (q *Queue) places() []string {
	if q.kind == KindPriority {
		return []string{"p:"}
	}
	return []string{"s:", "d:"}
}

// at reads the job at trail location loc ("s:<entry>", "d:<member>",
// "x:<dead letter>", "p:<priority job>"); nil when it is not there.
func (q *Queue) at(ctx context.Context, loc string) (*Job, error) {
	kind, id, _ := strings.Cut(loc, ":")
	switch kind {
	case "s":
		return q.streamJob(ctx, id)
	case "d":
		data, err := q.rdb().HGet(ctx, q.keys.DelayedJobs, id).Result()
		if errors.Is(err, redis.Nil) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		score, err := q.rdb().ZScore(ctx, q.keys.Delayed, id).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, err
		}
		j, ok := delayedJob(data, id, score)
		if !ok {
			return nil, nil
		}
		return &j, nil
	case "x":
		if !streamID(id) {
			return nil, nil
		}
		es, err := q.rdb().XRange(ctx, q.keys.Dead, id, id).Result()
		if err != nil || len(es) == 0 {
			return nil, err
		}
		j := deadJob(es[0].Values, id)
		return &j, nil
	case "p":
		return q.priorityJob(ctx, id)
	}
	return nil, nil
}

// streamJob reads stream entry id and its state in the group.
func (q *Queue) streamJob(ctx context.Context, id string) (*Job, error) {
	if !streamID(id) {
		return nil, nil
	}
	c := q.rdb()
	es, err := c.XRange(ctx, q.keys.Stream, id, id).Result()
	if err != nil || len(es) == 0 {
		return nil, err
	}
	last, _, _, err := q.group(ctx)
	if err != nil {
		return nil, err
	}
	j := jobFrom(es[0].Values, es[0].ID)
	j.State = StateWaiting
	if last != "" && !idLess(last, es[0].ID) {
		ps, err := c.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: q.keys.Stream, Group: q.in.opts.Group, Start: es[0].ID, End: es[0].ID, Count: 1}).Result()
		if err != nil {
			return nil, err
		}
		if len(ps) == 1 {
			j = runningJob(es[0], ps[0])
		} else {
			j.State = StateDone // acknowledged history
		}
	}
	return &j, nil
}

// priorityJob reads job id of the priority set and finds its state: in the
// ready set (waiting), the delayed set, or neither (leased: running).
func (q *Queue) priorityJob(ctx context.Context, id string) (*Job, error) {
	data, err := q.rdb().HGet(ctx, q.pkeys.Jobs, id).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	fields, err := wire.Unpack(data)
	if err != nil {
		return nil, nil
	}
	j := jobFrom(fields, id)
	m, where, err := q.findMember(ctx, id, j.Priority)
	if err != nil {
		return nil, err
	}
	setPriority(&j, m)
	switch where {
	case StateWaiting:
		j.State = StateWaiting
	case StateDelayed:
		j.State = StateDelayed
		if retrying(&j) {
			j.State = StateRetrying
		}
		if score, err := q.rdb().ZScore(ctx, q.pkeys.Delayed, m).Result(); err == nil {
			j.DueAt = time.UnixMilli(int64(score))
		}
	default:
		j.State = StateRunning
		j.Owner = leaseOwner(m)
	}
	return &j, nil
}

// readyScores returns the distinct scores of the ready set, lowest first,
// at most n of them.
func (q *Queue) readyScores(ctx context.Context, n int) ([]int64, error) {
	heads, err := q.levelHeads(ctx, n)
	out := make([]int64, len(heads))
	for i, z := range heads {
		out[i] = int64(z.Score)
	}
	return out, err
}

// levelHeads returns the first member of each distinct score of the ready
// set (the next job to run at that priority, and the oldest: members of
// equal score sort by their zero-padded sequence number), lowest score
// first, at most n of them, in one bounded script call.
func (q *Queue) levelHeads(ctx context.Context, n int) ([]redis.Z, error) {
	members, scores, err := q.db.Priority().LevelHeads(ctx, n)
	if err != nil {
		return nil, err
	}
	out := make([]redis.Z, len(members))
	for i, m := range members {
		out[i] = redis.Z{Member: m, Score: scores[i]}
	}
	return out, nil
}

// findMember finds the member of priority job id (of priority p) in the
// ready set, the delayed set or the lease set. A pushed job's member is
// "<seq padded to 20 digits>:<score>:<seq>", found at once by trying the
// scores of the ready set (up to 100 levels) and -p and p; a forwarded job's
// sequence number differs from its ID, so the sets are scanned, each for at
// most ScanLimit elements. where is "" when it was not found.
func (q *Queue) findMember(ctx context.Context, id string, p int64) (member string, where State, err error) {
	c := q.rdb()
	if digits(id) && len(id) <= 20 {
		scores, err := q.readyScores(ctx, 100)
		if err != nil {
			return "", "", err
		}
		scores = append(scores, -p, p)
		padded := strings.Repeat("0", 20-len(id)) + id
		var cands []string
		for _, s := range scores {
			cands = append(cands, fmt.Sprintf("%s:%d:%s", padded, s, id))
		}
		pipe := c.Pipeline()
		var ready, delayed []*redis.FloatCmd
		for _, m := range cands {
			ready = append(ready, pipe.ZScore(ctx, q.pkeys.Ready, m))
			delayed = append(delayed, pipe.ZScore(ctx, q.pkeys.Delayed, m))
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return "", "", err
		}
		for i, m := range cands {
			if ready[i].Err() == nil {
				return m, StateWaiting, nil
			}
			if delayed[i].Err() == nil {
				return m, StateDelayed, nil
			}
		}
	}
	for _, s := range []struct {
		key, pattern string
		where        State
	}{
		{q.pkeys.Leases, "*:" + id + "|*", StateRunning},
		{q.pkeys.Ready, "*:" + id, StateWaiting},
		{q.pkeys.Delayed, "*:" + id, StateDelayed},
	} {
		m, err := q.zscanFind(ctx, s.key, s.pattern)
		if err != nil || m != "" {
			return m, s.where, err
		}
	}
	return "", "", nil
}

// zscanFind returns the first member of key matching pattern, examining at
// most ScanLimit elements.
func (q *Queue) zscanFind(ctx context.Context, key, pattern string) (string, error) {
	var cursor uint64
	for seen := 0; seen < q.in.opts.ScanLimit; seen += pageSize {
		ms, next, err := q.rdb().ZScan(ctx, key, cursor, pattern, pageSize).Result()
		if err != nil {
			return "", err
		}
		if len(ms) > 0 {
			return ms[0], nil
		}
		if next == 0 {
			return "", nil
		}
		cursor = next
	}
	return "", nil
}
