package rdb

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq/internal/wire"
)

// addKeyed appends one job per flow key of keys (payload "<key><i>") and
// returns their IDs.
func (e *env) addKeyed(keys ...string) []string {
	e.t.Helper()
	ids := make([]string, len(keys))
	for i, k := range keys {
		f := (&wire.Job{Payload: []byte(k + string(rune('0'+i))), EnqMillis: 1}).Args()
		if k != "" {
			f = append(f, "fk", k)
		}
		id, err := e.c.XAdd(e.ctx, &redis.XAddArgs{Stream: e.k.Stream, Values: f}).Result()
		if err != nil {
			e.t.Fatal(err)
		}
		ids[i] = id
	}
	return ids
}

func (e *env) flowLimits(l FlowLimits) {
	e.t.Helper()
	if err := e.q.SetFlowLimits(e.ctx, l); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) flowRead(consumer string, n int) []string {
	e.t.Helper()
	got, err := e.q.FlowRead(e.ctx, FlowReadParams{Consumer: consumer, N: n, Budget: 100})
	if err != nil {
		e.t.Fatal(err)
	}
	var ps []string
	for _, g := range got {
		p, _ := g.Fields["payload"].(string)
		ps = append(ps, g.ID+"="+p)
	}
	return ps
}

// payloadsOf returns the payloads of entries "id=payload".
func payloadsOf(es []string) []string {
	var out []string
	for _, s := range es {
		out = append(out, s[slices.Index([]byte(s), '=')+1:])
	}
	return out
}

func idOf(s string) string { return s[:slices.Index([]byte(s), '=')] }

func (e *env) flowState() FlowState {
	e.t.Helper()
	st, err := e.q.FlowStatus(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return st
}

func TestQueue_FlowRead(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{})
	e.group()
	e.flowLimits(FlowLimits{PerKey: 1, Keys: map[string]int{"b": 2}})
	ids := e.addKeyed("a", "a", "b", "b", "b", "", "a")
	got := e.flowRead("c", 10)
	if want := []string{"a0", "b2", "b3", "5"}; !slices.Equal(payloadsOf(got), want) {
		t.Fatalf("admitted %v, want %v", got, want)
	}
	st := e.flowState()
	if st.Running != 4 || st.PerKey["a"] != 1 || st.PerKey["b"] != 2 || st.Waiting["a"] != 2 || st.Waiting["b"] != 1 {
		t.Fatalf("state %+v", st)
	}
	// The parked entries left the stream and the pending list, uncharged, and
	// the trail says where they wait.
	if n := e.card(e.k.Stream); n != 4 {
		t.Errorf("%d entries in the stream, want the 4 admitted", n)
	}
	if got := e.pending("c"); len(got) != 4 {
		t.Errorf("pending %v", got)
	}
	if at, _ := e.c.HGet(e.ctx, e.k.Trail, ids[1]).Result(); at != TrailWaiting+"a" {
		t.Errorf("trail of a parked job %q", at)
	}
	if none := e.flowRead("c", 10); len(none) != 0 {
		t.Fatalf("nothing left to read, but the flow read admitted %v", none)
	}
}

// TestQueue_FlowReadPaused: a flow read of a paused queue admits nothing
// (no slot taken, nothing set aside, the entries left pending for the
// consumer to put back) and says the queue is paused; after the resume
// the entries are admitted and new ones read as before.
func TestQueue_FlowReadPaused(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{})
	e.group()
	e.flowLimits(FlowLimits{PerKey: 1})
	ids := e.addKeyed("a", "b", "a")
	if err := e.c.Set(e.ctx, e.k.Paused, "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := e.q.FlowRead(e.ctx, FlowReadParams{Consumer: "c", N: 10, Budget: 100})
	if !errors.Is(err, ErrPaused) || len(got) != 3 {
		t.Fatalf("flow read while paused: %v, %v; want ErrPaused and the 3 entries read", got, err)
	}
	if st := e.flowState(); st.Running != 0 || len(st.Waiting) != 0 {
		t.Fatalf("a flow read while paused took %d slots and set %v aside", st.Running, st.Waiting)
	}
	if n := e.card(e.k.Stream); n != 3 {
		t.Fatalf("%d entries in the stream, want all 3", n)
	}
	if err := e.c.Del(e.ctx, e.k.Paused).Err(); err != nil {
		t.Fatal(err)
	}
	parked, err := e.q.FlowAdmit(e.ctx, "c", ids)
	if err != nil || !slices.Equal(parked, ids[2:]) {
		t.Fatalf("after the resume the admission parked %v, %v; want the second job of a", parked, err)
	}
	e.addKeyed("b")
	if got := e.flowRead("c", 10); len(got) != 0 {
		t.Fatalf("after the resume the flow read admitted %v, want nothing (b at its cap)", got)
	}
	if st := e.flowState(); st.Running != 2 || st.Waiting["a"] != 1 || st.Waiting["b"] != 1 {
		t.Fatalf("state %+v", st)
	}
}

// TestQueue_FlowAdmitReadTakenOver: an entry that another consumer took
// over and admitted between a read and its admission keeps its one slot
// (the key's count is not taken twice, which at cap 1 would also set it
// aside); an entry gone from the stream is not started and not set aside.
func TestQueue_FlowAdmitReadTakenOver(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{})
	e.group()
	e.flowLimits(FlowLimits{PerKey: 1})
	ids := e.addKeyed("a", "a")
	e.read("c1", 10)
	e.idle("c2", 0, ids[0]) // c2 takes it over
	if parked, err := e.q.FlowAdmit(e.ctx, "c2", ids[:1]); err != nil || len(parked) != 0 {
		t.Fatalf("takeover admission parked %v, %v", parked, err)
	}
	if err := e.c.XDel(e.ctx, e.k.Stream, ids[1]).Err(); err != nil {
		t.Fatal(err)
	}
	skip, more, err := e.q.FlowAdmitRead(e.ctx, FlowAdmitReadParams{Consumer: "c1", N: 10, First: ids[0], Last: ids[1],
		Read: []FlowRead{{ID: ids[0], Key: "a"}, {ID: ids[1], Key: "a"}}})
	if err != nil || !slices.Equal(skip, ids[1:]) || len(more) != 0 {
		t.Fatalf("admission: skip %v, more %v, %v; want the deleted entry skipped", skip, more, err)
	}
	if st := e.flowState(); st.Running != 1 || st.PerKey["a"] != 1 || len(st.Waiting) != 0 {
		t.Fatalf("state %+v, want one slot of a and nothing waiting", st)
	}
}

// TestQueue_FlowAdmitReadInStreamOrder: reads of two consumers admitted in
// the other order still admit in stream order: the later read's call
// admits the earlier read's entries first, so with a cap of 1 the key's
// first job starts and its second waits, whichever call came first.
func TestQueue_FlowAdmitReadInStreamOrder(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{})
	e.group()
	e.flowLimits(FlowLimits{PerKey: 1})
	ids := e.addKeyed("a", "a", "b")
	e.read("c1", 1)
	e.read("c2", 2)
	admit := func(consumer string, read ...FlowRead) []string {
		t.Helper()
		skip, _, err := e.q.FlowAdmitRead(e.ctx, FlowAdmitReadParams{Consumer: consumer, N: 10, First: read[0].ID, Last: read[len(read)-1].ID, Read: read})
		if err != nil {
			t.Fatal(err)
		}
		return skip
	}
	if skip := admit("c2", FlowRead{ID: ids[1], Key: "a"}, FlowRead{ID: ids[2], Key: "b"}); !slices.Equal(skip, ids[1:2]) {
		t.Fatalf("the later read's call did not start %v, want the second job of a only", skip)
	}
	if skip := admit("c1", FlowRead{ID: ids[0], Key: "a"}); len(skip) != 0 {
		t.Fatalf("the earlier read's call did not start %v, want its job (admitted by the other call)", skip)
	}
	st := e.flowState()
	if st.Running != 2 || st.PerKey["a"] != 1 || st.Waiting["a"] != 1 {
		t.Fatalf("state %+v, want a's first job and b's running, a's second waiting", st)
	}
	if held, _ := e.c.HExists(e.ctx, e.k.Flow().Run, ids[0]).Result(); !held {
		t.Errorf("the first job of a holds no slot")
	}
}

func TestQueue_FlowSettleReleasesInOrder(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{})
	e.group()
	e.flowLimits(FlowLimits{PerKey: 1})
	e.addKeyed("a", "a", "a")
	first := e.flowRead("c", 10)
	if !slices.Equal(payloadsOf(first), []string{"a0"}) {
		t.Fatalf("admitted %v", first)
	}
	// Acknowledging a0 releases a1 into the stream with its slot taken.
	if err := e.q.Ack(e.ctx, &AckParams{IDs: []string{idOf(first[0])}, Flow: "c"}); err != nil {
		t.Fatal(err)
	}
	if st := e.flowState(); st.Running != 1 || st.Waiting["a"] != 1 {
		t.Fatalf("after ack: %+v", st)
	}
	second := e.flowRead("c", 10)
	if !slices.Equal(payloadsOf(second), []string{"a1"}) {
		t.Fatalf("admitted %v", second)
	}
	// A retry gives back the slot too (the retried copy waits its turn
	// again), releasing a2; so does a dead letter.
	moved, err := e.q.Move(e.ctx, MoveParams{Consumer: "c", ID: idOf(second[0]), Fields: job("again"), Flow: true})
	if err != nil || !moved {
		t.Fatalf("Move: %v %v", moved, err)
	}
	// The moved copy ("again", without a flow key) is admitted with a2.
	third := e.flowRead("c", 10)
	if !slices.Equal(payloadsOf(third), []string{"again", "a2"}) {
		t.Fatalf("admitted %v", third)
	}
	dl, err := e.q.DeadLetter(e.ctx, DeadLetterParams{Consumer: "c", ID: idOf(third[1]), Fields: []any{"dl_reason", "x"}, Flow: true})
	if err != nil || dl == "" {
		t.Fatalf("DeadLetter: %q %v", dl, err)
	}
	if st := e.flowState(); st.Running != 1 || st.PerKey["a"] != 0 || len(st.Waiting) != 0 {
		t.Fatalf("end state %+v", st)
	}
}

func TestQueue_FlowGlobalRoundRobin(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{})
	e.group()
	e.flowLimits(FlowLimits{Global: 1})
	e.addKeyed("a", "a", "a", "a", "b", "b")
	got := e.flowRead("c", 10)
	var order []string
	for range 6 {
		if len(got) != 1 {
			t.Fatalf("admitted %v, want one job at a time", got)
		}
		order = append(order, payloadsOf(got)[0])
		if err := e.q.Ack(e.ctx, &AckParams{IDs: []string{idOf(got[0])}, Flow: "c"}); err != nil {
			t.Fatal(err)
		}
		if len(order) < 6 {
			got = e.flowRead("c", 10)
		}
	}
	// a0 ran first; then the waiting keys take turns.
	if want := []string{"a0", "a1", "b4", "a2", "b5", "a3"}; !slices.Equal(order, want) {
		t.Fatalf("order %v, want %v", order, want)
	}
}

func TestQueue_FlowAdmitAndSweep(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{})
	e.group()
	e.flowLimits(FlowLimits{PerKey: 1})
	ids := e.addKeyed("a", "a")
	// Read without flow control (a consumer that did not know the limits yet).
	if got := e.read("c", 10); len(got) != 2 {
		t.Fatalf("read %v", got)
	}
	parked, err := e.q.FlowAdmit(e.ctx, "c", ids)
	if err != nil || !slices.Equal(parked, ids[1:]) {
		t.Fatalf("FlowAdmit parked %v (%v), want %v", parked, err, ids[1:])
	}
	// Admitting again keeps the slot; an entry of another consumer is left alone.
	if parked, err := e.q.FlowAdmit(e.ctx, "c", ids[:1]); err != nil || len(parked) != 0 {
		t.Fatalf("again: %v %v", parked, err)
	}
	// A plain acknowledgement leaks the slot; the sweep gives it back and
	// releases the waiting job.
	if err := e.q.Ack(e.ctx, &AckParams{IDs: ids[:1]}); err != nil {
		t.Fatal(err)
	}
	freed, released, done, err := e.q.FlowSweep(e.ctx, 100)
	if err != nil || freed != 1 || released != 1 || !done {
		t.Fatalf("sweep: freed %d released %d done %v, %v", freed, released, done, err)
	}
	// The released job holds its slot while unread: the sweep keeps it.
	if freed, _, _, err := e.q.FlowSweep(e.ctx, 100); err != nil || freed != 0 {
		t.Fatalf("second sweep freed %d, %v", freed, err)
	}
	if got := payloadsOf(e.flowRead("c", 10)); !slices.Equal(got, []string{"a1"}) {
		t.Fatalf("admitted %v", got)
	}
}

func TestQueue_FlowKick(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{})
	e.group()
	e.flowLimits(FlowLimits{PerKey: 1})
	e.addKeyed("a", "a", "a")
	if got := e.flowRead("c", 10); len(got) != 1 {
		t.Fatalf("admitted %v", got)
	}
	// Raising the cap releases the waiting jobs at once.
	e.flowLimits(FlowLimits{PerKey: 3})
	if n, err := e.q.FlowKick(e.ctx, 10); err != nil || n != 0 {
		t.Fatalf("kick after SetFlowLimits released %d more, %v", n, err)
	}
	if got := payloadsOf(e.flowRead("c", 10)); !slices.Equal(got, []string{"a1", "a2"}) {
		t.Fatalf("admitted %v", got)
	}
	if l, err := e.q.GetFlowLimits(e.ctx); err != nil || l.PerKey != 3 || l.Global != 0 {
		t.Fatalf("limits %+v %v", l, err)
	}
}

func TestQueue_FlowRateLimit(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{})
	e.group()
	e.flowLimits(FlowLimits{Rate: 1, Rates: map[string]float64{"fast": 100}})
	ids := e.addKeyed("a", "a", "a", "fast", "fast")
	start := time.Now()
	if got := payloadsOf(e.flowRead("c", 10)); !slices.Equal(got, []string{"a0", "fast3", "fast4"}) {
		t.Fatalf("admitted %v", got)
	}
	// The others wait in the delayed set for their tokens, uncharged, under
	// their stable IDs.
	zs, err := e.c.ZRangeWithScores(e.ctx, e.k.Delayed, 0, -1).Result()
	if err != nil || len(zs) != 2 {
		t.Fatalf("delayed %v, %v", zs, err)
	}
	for i, z := range zs {
		m := z.Member.(string)
		if m != RateLimitedPrefix+ids[i+1] {
			t.Errorf("delayed member %q, want %q", m, RateLimitedPrefix+ids[i+1])
		}
		due := time.UnixMilli(int64(z.Score))
		if due.Before(start.Add(900*time.Millisecond)) || due.After(time.Now().Add(1100*time.Millisecond)) {
			t.Errorf("due at %v, want about 1 s after %v", due, start)
		}
		if at, _ := e.c.HGet(e.ctx, e.k.Trail, ids[i+1]).Result(); at != TrailDelayed+m {
			t.Errorf("trail %q", at)
		}
	}
	if l, err := e.q.GetFlowLimits(e.ctx); err != nil || l.Rate != 1 || l.Rates["fast"] != 100 {
		t.Fatalf("limits %+v, %v", l, err)
	}
}

func TestQueue_FlowDelete(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{})
	e.group()
	e.flowLimits(FlowLimits{PerKey: 1})
	ids := e.addKeyed("a", "a")
	e.flowRead("c", 10)
	packed, err := e.c.LIndex(e.ctx, e.k.Flow().Wait("a"), 0).Result()
	if err != nil {
		t.Fatal(err)
	}
	p := FlowDeleteParams{Key: "a", JobID: ids[1], Packed: packed}
	if res, err := e.q.FlowDelete(e.ctx, p); err != nil || res != "ok" {
		t.Fatalf("FlowDelete: %q, %v", res, err)
	}
	if n := e.card(e.k.Flow().Ring); n != 0 {
		t.Errorf("the ring still holds %d keys", n)
	}
	if e.c.HExists(e.ctx, e.k.Trail, ids[1]).Val() {
		t.Error("the trail still names the deleted job")
	}
	if res, err := e.q.FlowDelete(e.ctx, p); err != nil || res != ReplyGone {
		t.Fatalf("deleting again: %q, %v", res, err)
	}
}

// addKinded appends one job per "kind/key" of jobs (payload "<kind>/<key><i>")
// and returns their IDs.
func (e *env) addKinded(jobs ...string) []string {
	e.t.Helper()
	ids := make([]string, len(jobs))
	for i, j := range jobs {
		kind, key, _ := strings.Cut(j, "/")
		f := (&wire.Job{Payload: []byte(j + string(rune('0'+i))), EnqMillis: 1}).Args()
		if kind != "" {
			f = append(f, wire.FieldKind, kind)
		}
		if key != "" {
			f = append(f, "fk", key)
		}
		id, err := e.c.XAdd(e.ctx, &redis.XAddArgs{Stream: e.k.Stream, Values: f}).Result()
		if err != nil {
			e.t.Fatal(err)
		}
		ids[i] = id
	}
	return ids
}

func TestQueue_FlowKindCaps(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{})
	e.group()
	// Kind "r" runs one at a time in all; kind "m" one per key; "x" and
	// jobs without a kind are held only by the per-key cap of 2.
	e.flowLimits(FlowLimits{PerKey: 2, Kinds: map[string]int{"r": 1}, KindPerKey: map[string]int{"m": 1}})
	ids := e.addKinded("r/a", "r/b", "m/a", "m/a", "m/b", "x/a", "/a", "x/a")
	got := e.flowRead("c", 10)
	// r/b waits for kind r; the second m/a for key a of kind m; x/a and /a
	// for key a (r/a and m/a hold its 2 slots), the later x/a behind them.
	if want := []string{"r/a0", "m/a2", "m/b4"}; !slices.Equal(payloadsOf(got), want) {
		t.Fatalf("admitted %v, want %v", got, want)
	}
	st := e.flowState()
	if st.Running != 3 || st.PerKind["r"] != 1 || st.PerKind["m"] != 2 || st.PerKey["a"] != 2 {
		t.Fatalf("state %+v", st)
	}
	if st.Waiting["a"] != 4 || st.Waiting["b"] != 1 {
		t.Fatalf("waiting %v", st.Waiting)
	}
	lanes := map[FlowLane]bool{}
	for _, l := range st.Lanes {
		lanes[l] = true
	}
	for _, want := range []FlowLane{{Kind: "r", Key: "b", Waiting: 1}, {Kind: "m", Key: "a", Waiting: 1}, {Key: "a", Waiting: 3}} {
		if !lanes[want] {
			t.Errorf("no lane %+v in %+v", want, st.Lanes)
		}
	}
	if at, _ := e.c.HGet(e.ctx, e.k.Trail, ids[1]).Result(); at != TrailWaiting+Lane("r", "b") {
		t.Errorf("trail of r/b %q", at)
	}
	// Acknowledging r/a frees kind r (r/b starts) and a slot of key a (x/a
	// starts: the oldest of key a's own list).
	if err := e.q.Ack(e.ctx, &AckParams{IDs: []string{idOf(got[0])}, Flow: "c"}); err != nil {
		t.Fatal(err)
	}
	next := e.flowRead("c", 10)
	if got, want := payloadsOf(next), []string{"r/b1", "x/a5"}; !slices.Equal(slices.Sorted(slices.Values(got)), want) {
		t.Fatalf("after r/a: admitted %v, want %v", next, want)
	}
	// Key a holds 2 of 2 (m/a2, x/a5). Raising its cap to 3 and kind m's
	// cap per key to 2 makes room for one more of key a: the head of one of
	// its two lists (m/a3, or /a6 before x/a7).
	e.flowLimits(FlowLimits{PerKey: 3, Kinds: map[string]int{"r": 1}, KindPerKey: map[string]int{"m": 2}})
	more := payloadsOf(e.flowRead("c", 10))
	if len(more) != 1 || (more[0] != "m/a3" && more[0] != "/a6") {
		t.Fatalf("after raising: admitted %v, want m/a3 or /a6", more)
	}
	if st := e.flowState(); st.Running != 5 || st.PerKey["a"] != 3 || st.Waiting["a"] != 2 {
		t.Fatalf("after raising: %+v", st)
	}
}

func TestSplitLane(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ kind, key string }{{"", "a"}, {"k", "a"}, {"k", ""}, {"", ""}} {
		if kind, key := SplitLane(Lane(tc.kind, tc.key)); kind != tc.kind || key != tc.key {
			t.Errorf("SplitLane(Lane(%q, %q)) = %q, %q", tc.kind, tc.key, kind, key)
		}
	}
}

// TestQueue_FlowWeights checks the ratio of starts between two waiting
// keys of weights 3 and 1 under a global cap of 1: every slot that frees
// releases the next job of the round robin.
func TestQueue_FlowWeights(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{})
	e.group()
	e.flowLimits(FlowLimits{Global: 1, Weights: map[string]int{"a": 3}})
	var keys []string
	for range 40 {
		keys = append(keys, "a", "b")
	}
	e.addKeyed(keys...)
	running := e.flowRead("c", 10)
	starts := map[string]int{}
	var order []string
	for range 40 {
		if len(running) != 1 {
			t.Fatalf("running %v, want one job (global cap 1)", running)
		}
		if err := e.q.Ack(e.ctx, &AckParams{IDs: []string{idOf(running[0])}, Flow: "c"}); err != nil {
			t.Fatal(err)
		}
		running = e.flowRead("c", 10)
		for _, p := range payloadsOf(running) {
			starts[p[:1]]++
			order = append(order, p[:1])
		}
	}
	if starts["a"] != 30 || starts["b"] != 10 {
		t.Errorf("of 40 starts, key a (weight 3) had %d and b (weight 1) %d, want 30 and 10: %v", starts["a"], starts["b"], order)
	}
}

// TestQueue_FlowAckOwnedBatch: the acknowledgement looks up the entries the
// consumer owns with one bounded XPENDING over the batch's range; entries
// past a full reply are still found, and an entry another consumer took
// over keeps its slot (the sweep gives it back once it is settled).
func TestQueue_FlowAckOwnedBatch(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{})
	e.group()
	e.flowLimits(FlowLimits{Global: 1000})
	const n = 300 // more than the reply's bound for 3 IDs (2*3+256)
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "k" + strings.Repeat("x", i%5)
	}
	ids := e.addKeyed(keys...)
	got, err := e.q.FlowRead(e.ctx, FlowReadParams{Consumer: "c", N: n, Budget: n})
	if err != nil || len(got) != n {
		t.Fatalf("admitted %d of %d: %v", len(got), n, err)
	}
	// Another consumer takes over the middle entry.
	mid := ids[n/2]
	if err := e.c.XClaim(e.ctx, &redis.XClaimArgs{Stream: e.k.Stream, Group: e.q.group, Consumer: "other", Messages: []string{mid}}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.q.Ack(e.ctx, &AckParams{IDs: []string{ids[0], mid, ids[n-1]}, Flow: "c"}); err != nil {
		t.Fatal(err)
	}
	if st := e.flowState(); st.Running != n-2 {
		t.Fatalf("running %d after acknowledging 2 owned entries and 1 taken over, want %d", st.Running, n-2)
	}
	for _, id := range []string{ids[0], ids[n-1]} {
		if held, _ := e.c.HExists(e.ctx, e.k.Flow().Run, id).Result(); held {
			t.Errorf("entry %s still holds a slot after its acknowledgement", id)
		}
	}
	if held, _ := e.c.HExists(e.ctx, e.k.Flow().Run, mid).Result(); !held {
		t.Errorf("the entry another consumer took over lost its slot")
	}
}
