package writebehind_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/writebehind"
)

// recordingSink records the batches it is given. Each Write first calls
// before, when set, and returns its error.
type recordingSink struct {
	mu      sync.Mutex
	batches [][]writebehind.Change
	before  func(ctx context.Context, changes []writebehind.Change) error
}

func (s *recordingSink) Write(ctx context.Context, changes []writebehind.Change) error {
	if s.before != nil {
		if err := s.before(ctx, changes); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.batches = append(s.batches, slices.Clone(changes))
	return nil
}

// got returns the committed batches.
func (s *recordingSink) got() [][]writebehind.Change {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.batches)
}

// setMsg is a message as a Writer appends it for Set.
func setMsg(key string, version int64, value string) *streamq.Message {
	return &streamq.Message{
		Payload: []byte(value),
		Headers: map[string]string{
			writebehind.HeaderKey:     key,
			writebehind.HeaderOp:      writebehind.OpSet,
			writebehind.HeaderVersion: strconv.FormatInt(version, 10),
		},
	}
}

// hsetMsg is a message as a Writer appends it for SetFields; fields is the
// payload, normally from writebehind.EncodeFields.
func hsetMsg(key string, version int64, fields string) *streamq.Message {
	m := setMsg(key, version, fields)
	m.Headers[writebehind.HeaderOp] = writebehind.OpSetFields
	return m
}

// delMsg is a message as a Writer appends it for Delete.
func delMsg(key string, version int64) *streamq.Message {
	return &streamq.Message{
		Headers: map[string]string{
			writebehind.HeaderKey:     key,
			writebehind.HeaderOp:      writebehind.OpDelete,
			writebehind.HeaderVersion: strconv.FormatInt(version, 10),
		},
	}
}

// issuedMsg sets the issue time of a change message, as a Writer does.
func issuedMsg(m *streamq.Message, issued int64) *streamq.Message {
	m.Headers[writebehind.HeaderIssued] = strconv.FormatInt(issued, 10)
	return m
}

// handleAsync runs h.Handle in a goroutine and returns its result channel.
func handleAsync(ctx context.Context, h *writebehind.Handler, msg *streamq.Message) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- h.Handle(ctx, msg) }()
	return ch
}

// result waits (bounded) for a Handle result.
func result(t *testing.T, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("Handle did not return within 10s")
		return nil
	}
}

// waitWaiting waits until n Handle calls wait for their batch.
func waitWaiting(t *testing.T, h *writebehind.Handler, n int64) {
	t.Helper()
	redistest.WaitFor(t, 10*time.Second, fmt.Sprintf("%d Handle calls waiting", n), func() bool {
		return h.Stats().Waiting == n
	})
}

func TestNewHandler_Config(t *testing.T) {
	t.Parallel()
	sink := &recordingSink{}
	for _, tc := range []struct {
		name  string
		sink  writebehind.Sink
		cfg   *writebehind.HandlerConfig
		field string // "" means valid
	}{
		{name: "nil config", sink: sink},
		{name: "zero config", sink: sink, cfg: &writebehind.HandlerConfig{}},
		{name: "custom", sink: sink, cfg: &writebehind.HandlerConfig{MaxBatch: 1, MaxLatency: time.Millisecond, WriteTimeout: time.Second}},
		{name: "nil sink", field: "sink"},
		{name: "negative MaxBatch", sink: sink, cfg: &writebehind.HandlerConfig{MaxBatch: -1}, field: "HandlerConfig.MaxBatch"},
		{name: "negative MaxLatency", sink: sink, cfg: &writebehind.HandlerConfig{MaxLatency: -time.Second}, field: "HandlerConfig.MaxLatency"},
		{name: "negative WriteTimeout", sink: sink, cfg: &writebehind.HandlerConfig{WriteTimeout: -1}, field: "HandlerConfig.WriteTimeout"},
		{name: "negative MaxBatchBytes", sink: sink, cfg: &writebehind.HandlerConfig{MaxBatchBytes: -1}, field: "HandlerConfig.MaxBatchBytes"},
		{name: "Writer without a VersionedSink", sink: sink, cfg: &writebehind.HandlerConfig{Writer: &writebehind.Writer{}}, field: "HandlerConfig.Writer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h, err := writebehind.NewHandler(tc.sink, tc.cfg)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("NewHandler: %v", err)
				}
				if err := h.Close(); err != nil {
					t.Fatalf("Close: %v", err)
				}
				return
			}
			var ce *streamq.ConfigError
			if !errors.As(err, &ce) || ce.Field != tc.field {
				t.Fatalf("NewHandler error = %v, want a *streamq.ConfigError for %s", err, tc.field)
			}
			t.Log(err)
		})
	}
}

func TestFromMessage(t *testing.T) {
	t.Parallel()
	withHeader := func(m *streamq.Message, k, v string) *streamq.Message {
		m.Headers[k] = v
		return m
	}
	without := func(m *streamq.Message, k string) *streamq.Message {
		delete(m.Headers, k)
		return m
	}
	for _, tc := range []struct {
		name    string
		msg     *streamq.Message
		want    writebehind.Change
		wantErr error
	}{
		{name: "set", msg: setMsg("user:1", 7, "Ada"), want: writebehind.Change{Key: "user:1", Value: []byte("Ada"), Version: 7}},
		{name: "set empty", msg: setMsg("user:1", 7, ""), want: writebehind.Change{Key: "user:1", Value: []byte{}, Version: 7}},
		{name: "delete", msg: delMsg("user:1", 8), want: writebehind.Change{Key: "user:1", Deleted: true, Version: 8}},
		{name: "hash", msg: hsetMsg("user:1", 9, `{"a":"1","b":"<2>"}`), want: writebehind.Change{Key: "user:1", Value: []byte(`{"a":"1","b":"<2>"}`), Hash: true, Version: 9}},
		{name: "hash not canonical", msg: hsetMsg("user:1", 9, ` {"b":"2", "a":"1"}`), want: writebehind.Change{Key: "user:1", Value: []byte(` {"b":"2", "a":"1"}`), Hash: true, Version: 9}},
		{name: "hash empty payload", msg: hsetMsg("k", 1, ""), wantErr: writebehind.ErrMalformedChange},
		{name: "hash null", msg: hsetMsg("k", 1, "null"), wantErr: writebehind.ErrMalformedChange},
		{name: "hash not JSON", msg: hsetMsg("k", 1, "Ada"), wantErr: writebehind.ErrMalformedChange},
		{name: "hash number value", msg: hsetMsg("k", 1, `{"age":36}`), wantErr: writebehind.ErrMalformedChange},
		{name: "extra headers", msg: withHeader(setMsg("k", 1, "v"), "traceparent", "00-abc"), want: writebehind.Change{Key: "k", Value: []byte("v"), Version: 1}},
		{name: "nil message", msg: nil, wantErr: writebehind.ErrMalformedChange},
		{name: "no key", msg: without(setMsg("k", 1, "v"), writebehind.HeaderKey), wantErr: writebehind.ErrMalformedChange},
		{name: "no op", msg: without(setMsg("k", 1, "v"), writebehind.HeaderOp), wantErr: writebehind.ErrMalformedChange},
		{name: "unknown op", msg: withHeader(setMsg("k", 1, "v"), writebehind.HeaderOp, "upsert"), wantErr: writebehind.ErrMalformedChange},
		{name: "no version", msg: without(setMsg("k", 1, "v"), writebehind.HeaderVersion), wantErr: writebehind.ErrMalformedChange},
		{name: "version not a number", msg: withHeader(setMsg("k", 1, "v"), writebehind.HeaderVersion, "1.5"), wantErr: writebehind.ErrMalformedChange},
		{name: "version zero", msg: setMsg("k", 0, "v"), wantErr: writebehind.ErrMalformedChange},
		{name: "version negative", msg: setMsg("k", -3, "v"), wantErr: writebehind.ErrMalformedChange},
		{name: "version MaxInt64", msg: setMsg("k", math.MaxInt64, "v"), want: writebehind.Change{Key: "k", Value: []byte("v"), Version: math.MaxInt64}},
		{name: "version in exponent notation", msg: withHeader(setMsg("k", 1, "v"), writebehind.HeaderVersion, "1e+14"), wantErr: writebehind.ErrMalformedChange},
		{name: "version beyond MaxInt64", msg: withHeader(setMsg("k", 1, "v"), writebehind.HeaderVersion, "9223372036854775808"), wantErr: writebehind.ErrMalformedChange},
		{name: "issued", msg: issuedMsg(setMsg("k", 2, "v"), 1_750_000_000_123_456), want: writebehind.Change{Key: "k", Value: []byte("v"), Version: 2, Issued: 1_750_000_000_123_456}},
		{name: "issued not a number", msg: withHeader(setMsg("k", 1, "v"), writebehind.HeaderIssued, "soon"), wantErr: writebehind.ErrMalformedChange},
		{name: "issued negative", msg: issuedMsg(setMsg("k", 1, "v"), -1), wantErr: writebehind.ErrMalformedChange},
		{name: "delete with payload", msg: func() *streamq.Message { m := delMsg("k", 1); m.Payload = []byte("x"); return m }(), wantErr: writebehind.ErrMalformedChange},
		{name: "empty key", msg: setMsg("", 1, "v"), wantErr: writebehind.ErrInvalidChange},
		{name: "key too long", msg: setMsg(strings.Repeat("k", writebehind.MaxKeyBytes+1), 1, "v"), wantErr: writebehind.ErrInvalidChange},
		{name: "key with NUL", msg: setMsg("a\x00b", 1, "v"), wantErr: writebehind.ErrInvalidChange},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := writebehind.FromMessage(tc.msg)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("FromMessage error = %v, want %v", err, tc.wantErr)
				}
				t.Log(err)
				return
			}
			if err != nil {
				t.Fatalf("FromMessage: %v", err)
			}
			if got.Key != tc.want.Key || string(got.Value) != string(tc.want.Value) || (got.Value == nil) != (tc.want.Value == nil) ||
				got.Deleted != tc.want.Deleted || got.Hash != tc.want.Hash || got.Version != tc.want.Version || got.Issued != tc.want.Issued {
				t.Fatalf("FromMessage = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestHandler_Handle_FullBatch(t *testing.T) {
	t.Parallel()
	sink := &recordingSink{}
	// MaxLatency is long: only full batches and Close write anything.
	h := newHandler(t, sink, &writebehind.HandlerConfig{MaxBatch: 10, MaxLatency: time.Hour})
	var results []<-chan error
	for i := range 25 {
		results = append(results, handleAsync(t.Context(), h, setMsg(fmt.Sprintf("k%02d", i), int64(i+1), "v")))
	}
	// Two full batches are written; the last 5 changes wait for more.
	redistest.WaitFor(t, 10*time.Second, "2 batches written, 5 changes waiting", func() bool {
		s := h.Stats()
		return s.Changes == 20 && s.Waiting == 5
	})
	if got := sink.got(); len(got) != 2 || len(got[0]) != 10 || len(got[1]) != 10 {
		t.Fatalf("batches %v, want two of 10", batchSizes(got))
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	for i, ch := range results {
		if err := result(t, ch); err != nil {
			t.Errorf("Handle %d: %v", i, err)
		}
	}
	got := sink.got()
	if want := []int{10, 10, 5}; !slices.Equal(batchSizes(got), want) {
		t.Fatalf("batches %v, want %v", batchSizes(got), want)
	}
	s := h.Stats()
	if s.Changes != 25 || s.Rows != 25 || s.Batches != 3 || s.Waiting != 0 {
		t.Fatalf("stats %+v, want 25 changes and rows in 3 batches", s)
	}
}

func batchSizes(batches [][]writebehind.Change) []int {
	sizes := make([]int, len(batches))
	for i, b := range batches {
		sizes[i] = len(b)
	}
	return sizes
}

func TestHandler_Handle_MaxLatency(t *testing.T) {
	t.Parallel()
	sink := &recordingSink{}
	// 500 ms, not 20: on a loaded CI machine the second change arrived
	// more than 20 ms after the first and started a batch of its own.
	const latency = 500 * time.Millisecond
	h := newHandler(t, sink, &writebehind.HandlerConfig{MaxBatch: 1000, MaxLatency: latency})
	start := time.Now()
	a := handleAsync(t.Context(), h, setMsg("a", 1, "x"))
	b := handleAsync(t.Context(), h, setMsg("b", 2, "y"))
	for _, ch := range []<-chan error{a, b} {
		if err := result(t, ch); err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(start); d < latency {
		t.Errorf("batch written after %s, before MaxLatency", d)
	}
	// A change arriving later starts a new batch with its own deadline.
	if err := h.Handle(t.Context(), setMsg("c", 3, "z")); err != nil {
		t.Fatal(err)
	}
	if got := batchSizes(sink.got()); !slices.Equal(got, []int{2, 1}) {
		t.Fatalf("batches %v, want [2 1]", got)
	}
}

func TestHandler_Handle_Coalesce(t *testing.T) {
	t.Parallel()
	sink := &recordingSink{}
	h := newHandler(t, sink, &writebehind.HandlerConfig{MaxBatch: 8, MaxLatency: time.Hour})
	msgs := []*streamq.Message{
		setMsg("a", 3, "a3"), setMsg("a", 1, "a1"), setMsg("b", 2, "b2"), setMsg("a", 9, "a9"),
		delMsg("b", 5), setMsg("a", 4, "a4"), setMsg("c", 6, "c6"), setMsg("b", 4, "b4"),
	}
	var results []<-chan error
	for _, m := range msgs {
		results = append(results, handleAsync(t.Context(), h, m))
	}
	for _, ch := range results {
		if err := result(t, ch); err != nil {
			t.Fatal(err)
		}
	}
	got := sink.got()
	if len(got) != 1 {
		t.Fatalf("batches %v, want one", batchSizes(got))
	}
	rows := map[string]writebehind.Change{}
	for _, ch := range got[0] {
		if _, dup := rows[ch.Key]; dup {
			t.Fatalf("key %q written twice in one batch: %+v", ch.Key, got[0])
		}
		rows[ch.Key] = ch
	}
	want := map[string]writebehind.Change{
		"a": {Key: "a", Value: []byte("a9"), Version: 9},
		"b": {Key: "b", Deleted: true, Version: 5},
		"c": {Key: "c", Value: []byte("c6"), Version: 6},
	}
	if len(rows) != len(want) {
		t.Fatalf("rows %+v, want %+v", rows, want)
	}
	for k, w := range want {
		r := rows[k]
		if r.Version != w.Version || r.Deleted != w.Deleted || string(r.Value) != string(w.Value) {
			t.Errorf("row %q = %+v, want %+v", k, r, w)
		}
	}
	if s := h.Stats(); s.Changes != 8 || s.Rows != 3 || s.Batches != 1 {
		t.Fatalf("stats %+v, want 8 changes in 3 rows, 1 batch", s)
	}
}

// TestHandler_Handle_CoalesceHash coalesces hashes with the strings and
// deletions of the same keys: the newest version wins, whatever its kind.
func TestHandler_Handle_CoalesceHash(t *testing.T) {
	t.Parallel()
	sink := &recordingSink{}
	h := newHandler(t, sink, &writebehind.HandlerConfig{MaxBatch: 9, MaxLatency: time.Hour})
	msgs := []*streamq.Message{
		hsetMsg("a", 5, `{"n":"a5"}`), setMsg("a", 4, "a4"), hsetMsg("a", 2, `{"n":"a2"}`),
		setMsg("b", 7, "b7"), hsetMsg("b", 6, `{"n":"b6"}`),
		hsetMsg("c", 3, `{"n":"c3"}`), delMsg("c", 8),
		delMsg("d", 1), hsetMsg("d", 9, `{"n":"d9"}`),
	}
	var results []<-chan error
	for _, m := range msgs {
		results = append(results, handleAsync(t.Context(), h, m))
	}
	for _, ch := range results {
		if err := result(t, ch); err != nil {
			t.Fatal(err)
		}
	}
	got := sink.got()
	if len(got) != 1 {
		t.Fatalf("batches %v, want one", batchSizes(got))
	}
	rows := map[string]writebehind.Change{}
	for _, ch := range got[0] {
		rows[ch.Key] = ch
	}
	want := map[string]writebehind.Change{
		"a": {Key: "a", Value: []byte(`{"n":"a5"}`), Hash: true, Version: 5},
		"b": {Key: "b", Value: []byte("b7"), Version: 7},
		"c": {Key: "c", Deleted: true, Version: 8},
		"d": {Key: "d", Value: []byte(`{"n":"d9"}`), Hash: true, Version: 9},
	}
	if len(got[0]) != len(want) {
		t.Fatalf("rows %+v, want %+v", got[0], want)
	}
	for k, w := range want {
		r := rows[k]
		if r.Version != w.Version || r.Deleted != w.Deleted || r.Hash != w.Hash || string(r.Value) != string(w.Value) {
			t.Errorf("row %q = %+v, want %+v", k, r, w)
		}
	}
}

func TestHandler_Handle_SinkError(t *testing.T) {
	t.Parallel()
	errDown := errors.New("database is down")
	var fail sync.Once
	sink := &recordingSink{before: func(context.Context, []writebehind.Change) error {
		err := error(nil)
		fail.Do(func() { err = errDown })
		return err
	}}
	h := newHandler(t, sink, &writebehind.HandlerConfig{MaxBatch: 3, MaxLatency: time.Hour})
	var results []<-chan error
	for _, m := range []*streamq.Message{setMsg("a", 1, "x"), setMsg("a", 2, "y"), delMsg("b", 3)} {
		results = append(results, handleAsync(t.Context(), h, m))
	}
	for _, ch := range results {
		err := result(t, ch)
		if !errors.Is(err, errDown) {
			t.Fatalf("Handle error = %v, want the sink's error", err)
		}
		var perm *streamq.PermanentError
		if errors.As(err, &perm) {
			t.Fatalf("Handle error %v is permanent: the consumer would dead-letter instead of retrying", err)
		}
	}
	// The next batch goes through.
	for _, ch := range []<-chan error{
		handleAsync(t.Context(), h, setMsg("a", 2, "y")),
		handleAsync(t.Context(), h, delMsg("b", 3)),
		handleAsync(t.Context(), h, setMsg("c", 4, "z")),
	} {
		if err := result(t, ch); err != nil {
			t.Fatal(err)
		}
	}
	if s := h.Stats(); s.WriteErrors != 1 || s.Batches != 1 || s.Changes != 3 {
		t.Fatalf("stats %+v, want 1 write error, 1 batch of 3 changes", s)
	}
}

func TestHandler_Handle_SinkRefusesChange(t *testing.T) {
	t.Parallel()
	// A sink stricter than SQLSink: it refuses values longer than 3 bytes.
	sink := &recordingSink{before: func(_ context.Context, changes []writebehind.Change) error {
		for i, ch := range changes {
			if len(ch.Value) > 3 {
				return &writebehind.ChangeError{Index: i, Key: ch.Key, Reason: "value longer than 3 bytes"}
			}
		}
		return nil
	}}
	h := newHandler(t, sink, &writebehind.HandlerConfig{MaxBatch: 4, MaxLatency: time.Hour})
	ok1 := handleAsync(t.Context(), h, setMsg("a", 1, "x"))
	bad1 := handleAsync(t.Context(), h, setMsg("big", 2, "y"))
	bad2 := handleAsync(t.Context(), h, setMsg("big", 3, "too long"))
	ok2 := handleAsync(t.Context(), h, setMsg("c", 4, "z"))
	for _, ch := range []<-chan error{ok1, ok2} {
		if err := result(t, ch); err != nil {
			t.Fatalf("Handle of a valid change: %v", err)
		}
	}
	for _, ch := range []<-chan error{bad1, bad2} {
		err := result(t, ch)
		var perm *streamq.PermanentError
		if !errors.As(err, &perm) || !errors.Is(err, writebehind.ErrInvalidChange) {
			t.Fatalf("Handle of a refused key = %v, want a permanent ErrInvalidChange", err)
		}
	}
	got := sink.got()
	if len(got) != 1 || len(got[0]) != 2 {
		t.Fatalf("committed batches %v, want one with the 2 valid keys", batchSizes(got))
	}
	if s := h.Stats(); s.Rejected != 2 || s.Changes != 2 || s.Rows != 2 {
		t.Fatalf("stats %+v, want 2 rejected, 2 committed", s)
	}
}

func TestHandler_Handle_Malformed(t *testing.T) {
	t.Parallel()
	sink := &recordingSink{}
	h := newHandler(t, sink, nil)
	err := h.Handle(t.Context(), &streamq.Message{Payload: []byte("hello"), Headers: map[string]string{}})
	var perm *streamq.PermanentError
	if !errors.As(err, &perm) || !errors.Is(err, writebehind.ErrMalformedChange) {
		t.Fatalf("Handle = %v, want a permanent ErrMalformedChange", err)
	}
	if s := h.Stats(); s.Rejected != 1 {
		t.Fatalf("stats %+v, want 1 rejected", s)
	}
	if len(sink.got()) != 0 {
		t.Fatal("the sink was called for a malformed change")
	}
}

func TestHandler_Handle_CancelBeforeFlush(t *testing.T) {
	t.Parallel()
	sink := &recordingSink{}
	h := newHandler(t, sink, &writebehind.HandlerConfig{MaxBatch: 100, MaxLatency: time.Hour})
	errGone := errors.New("job timed out")
	ctx, cancel := context.WithCancelCause(t.Context())
	a := handleAsync(ctx, h, setMsg("a", 5, "new"))
	waitWaiting(t, h, 1)
	b := handleAsync(t.Context(), h, setMsg("b", 6, "kept"))
	waitWaiting(t, h, 2)
	cancel(errGone)
	if err := result(t, a); !errors.Is(err, errGone) {
		t.Fatalf("Handle with a cancelled ctx = %v, want its cause", err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if err := result(t, b); err != nil {
		t.Fatal(err)
	}
	got := sink.got()
	if len(got) != 1 || len(got[0]) != 1 || got[0][0].Key != "b" {
		t.Fatalf("batches %+v, want one with only b: the withdrawn change must not be written", got)
	}
	if s := h.Stats(); s.Withdrawn != 1 || s.Changes != 1 {
		t.Fatalf("stats %+v, want 1 withdrawn, 1 committed", s)
	}

	// A context that is already done never enters a batch.
	done, cancelDone := context.WithCancelCause(t.Context())
	cancelDone(errGone)
	if err := h.Handle(done, setMsg("c", 7, "x")); !errors.Is(err, errGone) {
		t.Fatalf("Handle with a done ctx = %v, want its cause", err)
	}
}

func TestHandler_Handle_CancelDuringWrite(t *testing.T) {
	t.Parallel()
	entered := make(chan struct{})
	release := make(chan struct{})
	sink := &recordingSink{before: func(context.Context, []writebehind.Change) error {
		close(entered)
		<-release
		return nil
	}}
	h := newHandler(t, sink, &writebehind.HandlerConfig{MaxBatch: 1})
	errGone := errors.New("shutdown deadline")
	ctx, cancel := context.WithCancelCause(t.Context())
	a := handleAsync(ctx, h, setMsg("a", 1, "x"))
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the sink was not called")
	}
	cancel(errGone)
	// Handle does not wait for the write: it returns the cause at once.
	if err := result(t, a); !errors.Is(err, errGone) {
		t.Fatalf("Handle = %v, want the cause", err)
	}
	close(release)
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	// The write committed anyway; a retry of the change would be ignored
	// by the sink as a version it already has.
	if got := sink.got(); len(got) != 1 {
		t.Fatalf("batches %v, want the one that was being written", batchSizes(got))
	}
	if s := h.Stats(); s.Withdrawn != 0 || s.Changes != 1 {
		t.Fatalf("stats %+v, want the change committed, not withdrawn", s)
	}
}

func TestHandler_Handle_SinkPanics(t *testing.T) {
	t.Parallel()
	var once sync.Once
	sink := &recordingSink{before: func(context.Context, []writebehind.Change) error {
		once.Do(func() { panic("boom") })
		return nil
	}}
	h := newHandler(t, sink, &writebehind.HandlerConfig{MaxBatch: 1})
	var pe *streamq.PanicError
	if err := h.Handle(t.Context(), setMsg("a", 1, "x")); !errors.As(err, &pe) || pe.Value != "boom" {
		t.Fatalf("Handle = %v, want a *streamq.PanicError", err)
	}
	if err := h.Handle(t.Context(), setMsg("a", 1, "x")); err != nil {
		t.Fatalf("Handle after a panicking write: %v", err)
	}
}

func TestHandler_Handle_WriteTimeout(t *testing.T) {
	t.Parallel()
	sink := &recordingSink{before: func(ctx context.Context, _ []writebehind.Change) error {
		<-ctx.Done()
		return ctx.Err()
	}}
	h := newHandler(t, sink, &writebehind.HandlerConfig{MaxBatch: 1, WriteTimeout: 20 * time.Millisecond})
	if err := h.Handle(t.Context(), setMsg("a", 1, "x")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Handle = %v, want the write's deadline error", err)
	}
}

func TestHandler_Close(t *testing.T) {
	t.Parallel()
	sink := &recordingSink{}
	h, err := writebehind.NewHandler(sink, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Handle(t.Context(), setMsg("a", 1, "x")); err != nil {
		t.Fatal(err)
	}
	for range 2 { // idempotent
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.Handle(t.Context(), setMsg("b", 2, "y")); !errors.Is(err, writebehind.ErrClosed) {
		t.Fatalf("Handle after Close = %v, want ErrClosed", err)
	}
	var perm *streamq.PermanentError
	if errors.As(writebehind.ErrClosed, &perm) {
		t.Fatal("ErrClosed must not be permanent: the consumer retries the change")
	}
}

func TestHandler_OnFlush(t *testing.T) {
	t.Parallel()
	errDown := errors.New("database is down")
	var calls int
	sink := &recordingSink{before: func(_ context.Context, changes []writebehind.Change) error {
		calls++ // the flusher is one goroutine
		if calls == 1 {
			return errDown
		}
		if i := slices.IndexFunc(changes, func(c writebehind.Change) bool { return c.Key == "bad" }); i >= 0 {
			return &writebehind.ChangeError{Index: i, Key: "bad", Reason: "refused"}
		}
		return nil
	}}
	infos := make(chan writebehind.FlushInfo, 10)
	h := newHandler(t, sink, &writebehind.HandlerConfig{
		MaxBatch:   3,
		MaxLatency: time.Hour,
		OnFlush:    func(fi writebehind.FlushInfo) { infos <- fi },
	})
	next := func() writebehind.FlushInfo {
		t.Helper()
		select {
		case fi := <-infos:
			return fi
		case <-time.After(10 * time.Second):
			t.Fatal("OnFlush was not called")
			return writebehind.FlushInfo{}
		}
	}
	batch := func(msgs ...*streamq.Message) {
		t.Helper()
		var results []<-chan error
		for _, m := range msgs {
			results = append(results, handleAsync(t.Context(), h, m))
		}
		for _, ch := range results {
			_ = result(t, ch)
		}
	}

	batch(setMsg("a", 1, "x"), setMsg("a", 2, "y"), setMsg("b", 3, "z"))
	if fi := next(); !errors.Is(fi.Err, errDown) || fi.Changes != 3 || fi.Rows != 2 {
		t.Fatalf("first flush %+v, want the sink's error for 3 changes in 2 rows", fi)
	}
	batch(setMsg("a", 1, "x"), setMsg("bad", 2, "y"), setMsg("b", 3, "z"))
	if fi := next(); fi.Err != nil || fi.Changes != 3 || fi.Rows != 2 || fi.Rejected != 1 {
		t.Fatalf("second flush %+v, want 3 changes, 2 rows committed, 1 rejected", fi)
	}
	if s := h.Stats(); s.Batches != 1 || s.WriteErrors != 1 || s.Rejected != 1 || s.Changes != 2 {
		t.Fatalf("stats %+v", s)
	}
}

// batchBytes returns the size of each batch: the sum of its changes' key and
// value lengths, as HandlerConfig.MaxBatchBytes counts them.
func batchBytes(batches [][]writebehind.Change) []int {
	sizes := make([]int, len(batches))
	for i, b := range batches {
		for _, ch := range b {
			sizes[i] += len(ch.Key) + len(ch.Value)
		}
	}
	return sizes
}

func TestHandler_Handle_MaxBatchBytes(t *testing.T) {
	t.Parallel()
	const limit = 1000
	sink := &recordingSink{}
	flushed := make(chan writebehind.FlushInfo, 20)
	h := newHandler(t, sink, &writebehind.HandlerConfig{
		MaxBatch:      100,
		MaxBatchBytes: limit,
		MaxLatency:    time.Hour, // only full batches and Close write anything
		OnFlush:       func(fi writebehind.FlushInfo) { flushed <- fi },
	})
	want := make(map[string]string)
	var results []<-chan error
	var returned atomic.Int64 // Handle calls that returned
	handle := func(msg *streamq.Message) {
		ch := make(chan error, 1)
		go func() {
			ch <- h.Handle(t.Context(), msg)
			returned.Add(1)
		}()
		results = append(results, ch)
	}
	for i := range 10 {
		key, value := fmt.Sprintf("k%02d", i), strings.Repeat(strconv.Itoa(i), 297) // 300 bytes
		want[key] = value
		handle(setMsg(key, int64(i+1), value))
	}
	huge := strings.Repeat("h", 2500) // larger than a batch may be
	want["huge"] = huge
	handle(setMsg("huge", 11, huge))
	// The batches fill up by size, not by count: once every change is in a
	// batch (its Handle call waits, or returned), all but the last batch
	// are written without waiting for MaxLatency or Close. A call that has
	// not started yet would find the handler closed.
	redistest.WaitFor(t, 10*time.Second, "every change in a batch, and the batches written by size", func() bool {
		r := returned.Load() // before Waiting: a call moves from Waiting to returned, never back
		s := h.Stats()
		return r+s.Waiting == int64(len(results)) && s.Changes >= 8
	})
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	for i, ch := range results {
		if err := result(t, ch); err != nil {
			t.Fatalf("Handle %d: %v", i, err)
		}
	}
	got := sink.got()
	sizes := batchBytes(got)
	for i, b := range got {
		if sizes[i] > limit && len(b) != 1 {
			t.Errorf("batch %d holds %d changes of %d bytes, want at most %d bytes or a single change", i, len(b), sizes[i], limit)
		}
	}
	// 3 changes of 300 bytes fit in 1000, the huge one goes alone.
	if len(got) < 5 {
		t.Errorf("%d batches (bytes %v), want at least 5", len(got), sizes)
	}
	arrived := make(map[string]string)
	for _, b := range got {
		for _, ch := range b {
			if _, dup := arrived[ch.Key]; dup {
				t.Errorf("key %q written twice", ch.Key)
			}
			arrived[ch.Key] = string(ch.Value)
		}
	}
	if !maps.Equal(arrived, want) {
		t.Fatalf("the sink got %d changes, want exactly the %d written", len(arrived), len(want))
	}
	close(flushed)
	var flushedBytes []int
	for fi := range flushed {
		flushedBytes = append(flushedBytes, fi.Bytes)
	}
	if !slices.Equal(flushedBytes, sizes) {
		t.Fatalf("FlushInfo.Bytes %v, want the batches' sizes %v", flushedBytes, sizes)
	}
	t.Logf("batch sizes in bytes: %v", sizes)
}

// TestHandler_Handle_DefaultMaxBatchBytes writes changes of MaxValueBytes
// with the default configuration: 500 of them would make one batch of 8 GiB,
// beyond what PostgreSQL accepts in a message (1 GB).
func TestHandler_Handle_DefaultMaxBatchBytes(t *testing.T) {
	t.Parallel()
	sink := &recordingSink{}
	h := newHandler(t, sink, &writebehind.HandlerConfig{MaxLatency: time.Hour})
	value := make([]byte, writebehind.MaxValueBytes) // shared by all messages
	var results []<-chan error
	for i := range 6 {
		m := setMsg(fmt.Sprintf("big%d", i), int64(i+1), "")
		m.Payload = value
		results = append(results, handleAsync(t.Context(), h, m))
	}
	waitWaiting(t, h, 3) // the first three were written: a fourth would not fit
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	for _, ch := range results {
		if err := result(t, ch); err != nil {
			t.Fatal(err)
		}
	}
	got := sink.got()
	if !slices.Equal(batchSizes(got), []int{3, 3}) {
		t.Fatalf("batches of %v changes (%v bytes), want two of 3 (at most DefaultMaxBatchBytes = %d)", batchSizes(got), batchBytes(got), writebehind.DefaultMaxBatchBytes)
	}
}

func TestHandler_Handle_VersionRegressedInBatch(t *testing.T) {
	t.Parallel()
	sink := &recordingSink{}
	h := newHandler(t, sink, &writebehind.HandlerConfig{MaxBatch: 4, MaxLatency: time.Hour})
	const t0 = 1_750_000_000_000_000
	results := []<-chan error{
		// An old change of k, and one written after the counter was reset:
		// neither may win silently.
		handleAsync(t.Context(), h, issuedMsg(setMsg("k", 105, "old"), t0)),
		handleAsync(t.Context(), h, issuedMsg(setMsg("k", 2, "after the reset"), t0+100)),
		// A replay of an older change of z is coalesced away silently.
		handleAsync(t.Context(), h, issuedMsg(setMsg("z", 7, "z7"), t0+50)),
		handleAsync(t.Context(), h, issuedMsg(setMsg("z", 6, "z6"), t0+40)),
	}
	for i, ch := range results {
		err := result(t, ch)
		var perm *streamq.PermanentError
		switch {
		case i < 2 && (!errors.As(err, &perm) || !errors.Is(err, writebehind.ErrVersionRegressed)):
			t.Fatalf("Handle of k = %v, want a permanent ErrVersionRegressed", err)
		case i >= 2 && err != nil:
			t.Fatalf("Handle of z: %v", err)
		}
	}
	got := sink.got()
	if len(got) != 1 || len(got[0]) != 1 || got[0][0].Key != "z" || got[0][0].Version != 7 {
		t.Fatalf("batches %v, want one with z at version 7", got)
	}
	if s := h.Stats(); s.Rejected != 2 || s.Changes != 2 {
		t.Fatalf("stats %+v, want 2 rejected and 2 committed", s)
	}
}

func TestHandler_Handle_SinkRefusesSeveral(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	// The sink refuses two changes of the batch at once, as SQLSink does.
	sink := &recordingSink{before: func(_ context.Context, changes []writebehind.Change) error {
		calls.Add(1)
		var errs []error
		for i, ch := range changes {
			switch ch.Key {
			case "regressed":
				errs = append(errs, &writebehind.ChangeError{Index: i, Key: ch.Key, Err: writebehind.ErrVersionRegressed, Reason: "the sink holds version 9"})
			case "bad":
				errs = append(errs, &writebehind.ChangeError{Index: i, Key: ch.Key, Reason: "refused"})
			}
		}
		return errors.Join(errs...)
	}}
	h := newHandler(t, sink, &writebehind.HandlerConfig{MaxBatch: 5, MaxLatency: time.Hour})
	msgs := []*streamq.Message{setMsg("a", 1, "x"), setMsg("regressed", 2, "y"), setMsg("bad", 3, "z"), setMsg("regressed", 1, "w"), setMsg("b", 4, "v")}
	results := make([]<-chan error, len(msgs))
	for i, m := range msgs {
		results[i] = handleAsync(t.Context(), h, m)
	}
	for i, ch := range results {
		err := result(t, ch)
		key := msgs[i].Headers[writebehind.HeaderKey]
		var perm *streamq.PermanentError
		switch key {
		case "regressed":
			if !errors.As(err, &perm) || !errors.Is(err, writebehind.ErrVersionRegressed) {
				t.Fatalf("Handle of %s = %v, want a permanent ErrVersionRegressed", key, err)
			}
		case "bad":
			if !errors.As(err, &perm) || !errors.Is(err, writebehind.ErrInvalidChange) {
				t.Fatalf("Handle of %s = %v, want a permanent ErrInvalidChange", key, err)
			}
		default:
			if err != nil {
				t.Fatalf("Handle of %s: %v", key, err)
			}
		}
	}
	// One refused write, then one that commits the rest: both refusals are
	// taken out at once.
	if n := calls.Load(); n != 2 {
		t.Fatalf("the sink was called %d times, want 2", n)
	}
	if got := sink.got(); len(got) != 1 || len(got[0]) != 2 {
		t.Fatalf("committed batches %v, want one with a and b", got)
	}
	if s := h.Stats(); s.Rejected != 3 || s.Changes != 2 {
		t.Fatalf("stats %+v, want 3 rejected, 2 committed", s)
	}
}
