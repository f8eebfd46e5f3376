package rdb

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq/internal/wire"
)

// push pushes jobs with payloads ps at score in one call and returns their
// IDs.
func (e *env) push(score string, m Memo, ps ...string) []string {
	e.t.Helper()
	p := PushParams{Memo: m}
	for _, pl := range ps {
		p.Add(score, wire.Pack(job(pl)))
	}
	ids, err := e.q.Priority().Push(e.ctx, &p)
	if err != nil {
		e.t.Fatal(err)
	}
	return ids
}

// pop leases up to n jobs with token prefix prefix.
func (e *env) pop(n int, prefix string) PopResult {
	e.t.Helper()
	res, err := e.q.Priority().Pop(e.ctx, PopParams{Run: "run", Lease: time.Minute, N: n, Prefix: prefix})
	if err != nil {
		e.t.Fatal(err)
	}
	return res
}

// payloadOf returns the payload of packed job data.
func payloadOf(t *testing.T, data string) string {
	t.Helper()
	f, err := wire.Unpack(data)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := wire.Str(f["payload"])
	return s
}

func TestPrioritySet_Push(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{})
	m := e.q.NewMemo()
	ids := e.push("0", m, "a", "b")
	if !slices.Equal(ids, []string{"1", "2"}) || e.card(e.pk.Ready) != 2 || e.card(e.pk.Jobs) != 2 || e.card(e.pk.Notify) != 1 {
		t.Fatalf("Push: %v; ready %d, jobs %d", ids, e.card(e.pk.Ready), e.card(e.pk.Jobs))
	}
	before := e.snapshot()
	if again := e.push("0", m, "a", "b"); !slices.Equal(again, ids) {
		t.Errorf("re-sent Push: %v, want %v", again, ids)
	}
	e.unchanged("a re-sent push", before)
}

// TestPrioritySet_Forward moves a pending stream entry into the ready set
// and acknowledges it; a call sent again finds it acknowledged.
func TestPrioritySet_Forward(t *testing.T) {
	t.Parallel()
	e, id := held(t, Config{})
	p := ForwardParams{ID: id, Score: "-5", Data: wire.Pack(job("job"))}
	for range 2 {
		if err := e.q.Priority().Forward(e.ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	ms := e.c.ZRangeWithScores(e.ctx, e.pk.Ready, 0, -1).Val()
	if len(ms) != 1 || ms[0].Score != -5 || !strings.HasSuffix(ms[0].Member.(string), ":-5:"+id) || len(e.pending("")) != 0 {
		t.Errorf("ready %v, pending %v", ms, e.pending(""))
	}
}

// TestPrioritySet_Pop leases at most N jobs in priority order; a call sent
// again with its prefix answers the same jobs; an empty set answers the
// newest wake-up entry.
func TestPrioritySet_Pop(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{})
	e.push("5", Memo{}, "low")
	e.push("1", Memo{}, "high1", "high2")
	res := e.pop(2, "w:r.1:")
	if len(res.Jobs) != 2 || payloadOf(t, res.Jobs[0].Data) != "high1" || payloadOf(t, res.Jobs[1].Data) != "high2" {
		t.Fatalf("Pop: %+v", res)
	}
	if !strings.HasSuffix(res.Jobs[0].Lease, "|w:r.1:1") || e.card(e.pk.Leases) != 2 || e.card(e.pk.Ready) != 1 {
		t.Fatalf("lease %q, leases %d, ready %d", res.Jobs[0].Lease, e.card(e.pk.Leases), e.card(e.pk.Ready))
	}
	again := e.pop(2, "w:r.1:")
	if len(again.Jobs) != 2 || again.Jobs[0].Lease != res.Jobs[0].Lease || e.card(e.pk.Ready) != 1 {
		t.Fatalf("re-sent Pop: %+v, ready %d", again, e.card(e.pk.Ready))
	}
	e.pop(5, "w:r.2:")
	empty := e.pop(5, "w:r.3:")
	if len(empty.Jobs) != 0 || empty.Notify == "" || empty.Notify == "0-0" {
		t.Errorf("Pop of an empty set: %+v, want the newest wake-up entry", empty)
	}
	// A member whose data is gone is dropped and counted.
	ids := e.push("0", Memo{}, "x")
	e.c.HDel(e.ctx, e.pk.Jobs, ids[0])
	if res := e.pop(1, "w:r.4:"); res.Missing != 1 || len(res.Jobs) != 0 || e.card(e.pk.Ready) != 0 {
		t.Errorf("Pop of a job without data: %+v", res)
	}
}

// TestPrioritySet_PopWeighted shares a pop between bands by weight, and
// leases at most N.
func TestPrioritySet_PopWeighted(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{})
	for i := range 10 {
		e.push("1", Memo{}, fmt.Sprint("a", i))
		e.push("2", Memo{}, fmt.Sprint("b", i))
	}
	bands := []PopBand{{Min: "1", Max: "1", Weight: 3}, {Min: "2", Max: "2", Weight: 1}}
	res, err := e.q.Priority().Pop(e.ctx, PopParams{Run: "run", Lease: time.Minute, N: 8, Prefix: "w:r.1:", Bands: bands})
	if err != nil || len(res.Jobs) != 8 || len(res.Credits) != 2 {
		t.Fatalf("weighted Pop: %+v, %v", res, err)
	}
	var a int
	for _, j := range res.Jobs {
		if strings.HasPrefix(payloadOf(t, j.Data), "a") {
			a++
		}
	}
	if a != 6 {
		t.Errorf("%d of 8 jobs from the band of weight 3, want 6", a)
	}
}

// popped returns a queue with n jobs pushed and leased, and the leases.
func popped(t *testing.T, n int) (*env, []Popped) {
	t.Helper()
	e := setup(t, Config{})
	ps := make([]string, n)
	for i := range ps {
		ps[i] = fmt.Sprint("job", i)
	}
	e.push("0", Memo{}, ps...)
	res := e.pop(n, "w:r.1:")
	if len(res.Jobs) != n {
		t.Fatalf("popped %d jobs, want %d", len(res.Jobs), n)
	}
	return e, res.Jobs
}

// leaseID returns the job ID of a lease member.
func leaseID(lease string) string {
	m, _, _ := strings.Cut(lease, "|")
	return m[strings.LastIndexByte(m, ':')+1:]
}

func TestPrioritySet_Finish(t *testing.T) {
	t.Parallel()
	e, jobs := popped(t, 2)
	p := FinishParams{Leases: []string{jobs[0].Lease}, IDs: []string{leaseID(jobs[0].Lease)}}
	if done, left, err := e.q.Priority().Finish(e.ctx, p); done != 1 || left != 0 || err != nil {
		t.Fatalf("Finish: %d, %d, %v", done, left, err)
	}
	if e.card(e.pk.Leases) != 1 || e.card(e.pk.Jobs) != 1 {
		t.Errorf("leases %d, jobs %d; want the other job only", e.card(e.pk.Leases), e.card(e.pk.Jobs))
	}
	// Sent again: the job is gone; it is counted as left, nothing changes.
	before := e.snapshot()
	if done, left, err := e.q.Priority().Finish(e.ctx, p); done != 0 || left != 1 || err != nil {
		t.Errorf("re-sent Finish: %d, %d, %v", done, left, err)
	}
	e.unchanged("a re-sent finish", before)
}

func TestPrioritySet_KeepAlive(t *testing.T) {
	t.Parallel()
	e, jobs := popped(t, 1)
	e.c.ZAdd(e.ctx, e.pk.Leases, redis.Z{Score: 1, Member: jobs[0].Lease})
	for range 2 { // sent again, it extends again
		lost, err := e.q.Priority().KeepAlive(e.ctx, KeepAliveParams{Lease: time.Hour, Leases: []string{jobs[0].Lease, "gone|x"}})
		if err != nil || !slices.Equal(lost, []string{"gone|x"}) {
			t.Fatalf("KeepAlive: %v, %v", lost, err)
		}
	}
	if dl := e.c.ZScore(e.ctx, e.pk.Leases, jobs[0].Lease).Val(); time.Until(time.UnixMilli(int64(dl))) < 59*time.Minute {
		t.Errorf("lease deadline %v, want an hour from now", time.UnixMilli(int64(dl)))
	}
}

// TestPrioritySet_Reap returns expired leases (counting a crash) and due
// retries to the ready set in their places, at most limit of each per call.
func TestPrioritySet_Reap(t *testing.T) {
	t.Parallel()
	e, jobs := popped(t, 3)
	for _, j := range jobs {
		e.c.ZAdd(e.ctx, e.pk.Leases, redis.Z{Score: 1, Member: j.Lease}) // expired
	}
	ids, due, err := e.q.Priority().Reap(e.ctx, 2)
	if err != nil || len(ids) != 2 || due != 0 || e.card(e.pk.Ready) != 2 || e.card(e.pk.Leases) != 1 {
		t.Fatalf("Reap with limit 2: %v, %d, %v; ready %d", ids, due, err, e.card(e.pk.Ready))
	}
	if n, _ := e.c.HGet(e.ctx, e.pk.Deliveries, ids[0]).Int(); n != 1 {
		t.Errorf("delivery counter %d, want 1 crashed start", n)
	}
	ids, _, _ = e.q.Priority().Reap(e.ctx, 2)
	if len(ids) != 1 {
		t.Fatalf("second Reap: %v", ids)
	}
	// Sent again: nothing is expired any more.
	if ids, due, err := e.q.Priority().Reap(e.ctx, 2); len(ids) != 0 || due != 0 || err != nil {
		t.Errorf("Reap again: %v, %d, %v", ids, due, err)
	}
	if got := e.c.ZRange(e.ctx, e.pk.Ready, 0, -1).Val(); len(got) != 3 || !strings.HasSuffix(got[0], ":0:1") {
		t.Errorf("ready %v, want the jobs back in their places", got)
	}
}

// TestPrioritySet_MarkWaiting: a waiting lease expires without a charge.
func TestPrioritySet_MarkWaiting(t *testing.T) {
	t.Parallel()
	e, jobs := popped(t, 1)
	for range 2 { // sent again, the same mark
		if ok, err := e.q.Priority().MarkWaiting(e.ctx, MarkWaitingParams{Lease: jobs[0].Lease, Waiting: true}); !ok || err != nil {
			t.Fatalf("MarkWaiting: %v, %v", ok, err)
		}
	}
	e.c.ZAdd(e.ctx, e.pk.Leases, redis.Z{Score: 1, Member: jobs[0].Lease})
	if ids, _, err := e.q.Priority().Reap(e.ctx, 10); len(ids) != 1 || err != nil {
		t.Fatalf("Reap: %v, %v", ids, err)
	}
	if n, _ := e.c.HGet(e.ctx, e.pk.Deliveries, ids0(jobs)).Int(); n != 0 {
		t.Errorf("an expired waiting lease was charged: %d", n)
	}
	if ok, _ := e.q.Priority().MarkWaiting(e.ctx, MarkWaitingParams{Lease: jobs[0].Lease}); ok {
		t.Error("MarkWaiting of an expired lease succeeded")
	}
}

func ids0(jobs []Popped) string { return leaseID(jobs[0].Lease) }

func TestPrioritySet_Retry(t *testing.T) {
	t.Parallel()
	for _, delay := range []time.Duration{0, time.Minute} {
		t.Run(fmt.Sprint("delay=", delay), func(t *testing.T) {
			t.Parallel()
			e, jobs := popped(t, 1)
			m := e.q.NewMemo()
			p := RetryParams{Lease: jobs[0].Lease, Delay: delay, Data: wire.Pack(job("retried")), Settle: Settle{Failed: true}, Memo: m}
			if ok, err := e.q.Priority().Retry(e.ctx, p); !ok || err != nil {
				t.Fatalf("Retry: %v, %v", ok, err)
			}
			set := e.pk.Ready
			if delay > 0 {
				set = e.pk.Delayed
			}
			if e.card(set) != 1 || e.card(e.pk.Leases) != 0 || payloadOf(t, e.c.HGet(e.ctx, e.pk.Jobs, ids0(jobs)).Val()) != "retried" {
				t.Fatalf("after Retry: %s holds %d, leases %d", set, e.card(set), e.card(e.pk.Leases))
			}
			if e.failures() != 1 {
				t.Errorf("%d failures counted, want 1", e.failures())
			}
			before := e.snapshot()
			if ok, err := e.q.Priority().Retry(e.ctx, p); !ok || err != nil {
				t.Errorf("re-sent Retry: %v, %v; want the first reply", ok, err)
			}
			e.unchanged("a re-sent retry", before)
		})
	}
}

func TestPrioritySet_DeadLetter(t *testing.T) {
	t.Parallel()
	e, jobs := popped(t, 1)
	e.c.HSet(e.ctx, e.k.Cancel, "jid", 1)
	m := e.q.NewMemo()
	p := PriorityDeadLetterParams{Lease: jobs[0].Lease, Settle: Settle{JobID: "jid"}, Fields: []any{"dl_reason", "permanent"}, Memo: m}
	dl, err := e.q.Priority().DeadLetter(e.ctx, p)
	if err != nil || dl == "" || !slices.Equal(e.entries(e.k.Dead), []string{dl}) {
		t.Fatalf("DeadLetter: %q, %v", dl, err)
	}
	if e.card(e.pk.Leases) != 0 || e.card(e.pk.Jobs) != 0 || e.card(e.k.Cancel) != 0 || e.failures() != 1 {
		t.Error("the job, its lease or its cancel request is left, or the failure not counted")
	}
	if at, _ := e.c.HGet(e.ctx, e.k.Trail, "jid").Result(); at != TrailDead+dl {
		t.Errorf("trail %q", at)
	}
	before := e.snapshot()
	if again, err := e.q.Priority().DeadLetter(e.ctx, p); again != dl || err != nil {
		t.Errorf("re-sent DeadLetter: %q, %v; want %q", again, err, dl)
	}
	e.unchanged("a re-sent dead letter", before)
	p.Memo = Memo{}
	if again, err := e.q.Priority().DeadLetter(e.ctx, p); again != "" || err != nil {
		t.Errorf("DeadLetter of a job no longer held: %q, %v", again, err)
	}
}

// TestPrioritySet_Control deletes a waiting job, runs a delayed one, and
// cancels a running one, each only in its state.
func TestPrioritySet_Control(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{Clock: offsetClock(time.Hour)})
	ids := e.push("0", Memo{}, "waiting", "delayed", "running")
	members := e.c.ZRange(e.ctx, e.pk.Ready, 0, -1).Val()
	e.c.ZRem(e.ctx, e.pk.Ready, members[1], members[2])
	e.c.ZAdd(e.ctx, e.pk.Delayed, redis.Z{Score: 1e15, Member: members[1]})
	ps := e.q.Priority()
	for _, tc := range []struct {
		action, member, id, want string
	}{
		{"cancel", members[0], ids[0], ReplyWaiting},
		{"delete", members[0], ids[0], "ok"},
		{"delete", members[0], ids[0], ReplyGone}, // sent again
		{"run", members[1], ids[1], "ok"},
		{"run", members[1], ids[1], ReplyWaiting}, // sent again
		{"cancel", "", ids[2], "ok"},
		{"delete", "", ids[2], "running"},
	} {
		got, err := ps.Control(e.ctx, PriorityControlParams{Action: tc.action, Member: tc.member, ID: tc.id, JobID: "jid-" + tc.id})
		if err != nil || got != tc.want {
			t.Errorf("%s %s: %q, %v; want %q", tc.action, tc.id, got, err, tc.want)
		}
	}
	if got := e.c.ZRange(e.ctx, e.pk.Ready, 0, -1).Val(); !slices.Equal(got, members[1:2]) {
		t.Errorf("ready %v, want the job run now", got)
	}
	at, _ := e.c.HGet(e.ctx, e.k.Cancel, "jid-"+ids[2]).Int64()
	if time.Until(time.UnixMilli(at)) < 59*time.Minute {
		t.Errorf("cancel request stamped %v, want the queue's clock", time.UnixMilli(at))
	}
}

// TestPrioritySet_LevelHeads returns the head of each priority, at most
// max of them.
func TestPrioritySet_LevelHeads(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{})
	for _, s := range []string{"3", "1", "2", "1"} {
		e.push(s, Memo{}, "j"+s)
	}
	members, scores, err := e.q.Priority().LevelHeads(e.ctx, 2)
	if err != nil || !slices.Equal(scores, []float64{1, 2}) || len(members) != 2 || !strings.HasSuffix(members[0], ":1:2") {
		t.Errorf("LevelHeads(2): %v %v %v", members, scores, err)
	}
}
