package writebehind_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/pgtest"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/writebehind"
	"github.com/streamq/streamq/writebehind/postgres"
	"github.com/streamq/streamq/writebehind/sqlite"
)

// drainTimeout bounds the wait for a queue to be worked off.
const drainTimeout = 2 * time.Minute

// e2eDialects lists the databases the end-to-end tests run against.
func e2eDialects() []writebehind.Dialect {
	return []writebehind.Dialect{writebehind.DialectSQLite, writebehind.DialectPostgres}
}

// postgresDSN returns the DSN of the test PostgreSQL (see pgtest.DSN).
func postgresDSN() string { return pgtest.DSN() }

// openDB opens a database of dialect d for one test: a new SQLite file in
// t.TempDir(), or a pool on the test PostgreSQL (dsn overrides its DSN when
// not empty). It is closed when the test ends.
func openDB(tb testing.TB, d writebehind.Dialect, dsn string) *sql.DB {
	tb.Helper()
	var (
		db  *sql.DB
		err error
	)
	switch d {
	case writebehind.DialectSQLite:
		db, err = sqlite.Open(filepath.Join(tb.TempDir(), "wb.db"))
	case writebehind.DialectPostgres:
		if dsn == "" {
			dsn = postgresDSN()
		}
		db, err = postgres.Open(dsn)
	default:
		tb.Fatalf("no test database for dialect %v", d)
	}
	if err != nil {
		tb.Fatalf("open %v: %v", d, err)
	}
	tb.Cleanup(func() { _ = db.Close() })
	if d == writebehind.DialectPostgres {
		db.SetMaxOpenConns(8)
		pgtest.Require(tb, db, dsn)
	}
	return db
}

// tableFor returns a table name that no other test uses.
func tableFor(tb testing.TB) string {
	var sb strings.Builder
	sb.WriteString("wbt_")
	for _, r := range strings.ToLower(tb.Name()) {
		if sb.Len() >= 40 {
			break
		}
		if 'a' <= r && r <= 'z' || '0' <= r && r <= '9' {
			sb.WriteRune(r)
		} else {
			sb.WriteByte('_')
		}
	}
	fmt.Fprintf(&sb, "_%016x", rand.Uint64())
	return sb.String()
}

// testSink is an SQLSink on a table of its own.
type testSink struct {
	*writebehind.SQLSink
	db      *sql.DB
	table   string
	dialect writebehind.Dialect
}

// newSink creates a sink of dialect d on a new table, dropped when the test
// ends. dsn overrides the PostgreSQL DSN when not empty.
func newSink(tb testing.TB, d writebehind.Dialect, dsn string) *testSink {
	tb.Helper()
	db := openDB(tb, d, dsn)
	return newSinkOn(tb, db, d, tableFor(tb))
}

// newSinkOn creates the sink's table in db and drops it when the test ends.
func newSinkOn(tb testing.TB, db *sql.DB, d writebehind.Dialect, table string) *testSink {
	tb.Helper()
	s, err := writebehind.NewSQLSink(db, &writebehind.SQLSinkConfig{Dialect: d, Table: table})
	if err != nil {
		tb.Fatalf("NewSQLSink: %v", err)
	}
	if err := s.CreateSchema(context.Background()); err != nil {
		tb.Fatalf("CreateSchema: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := db.ExecContext(ctx, `DROP TABLE IF EXISTS "`+table+`"`); err != nil {
			tb.Errorf("drop table %s: %v", table, err)
		}
	})
	return &testSink{SQLSink: s, db: db, table: table, dialect: d}
}

// dbRow is one row of a sink's table.
type dbRow struct {
	value   []byte
	version int64
	deleted bool
}

// rows reads the whole table, tombstones included.
func (s *testSink) rows(tb testing.TB) map[string]dbRow {
	tb.Helper()
	return readRows(tb, s.db, s.table)
}

func readRows(tb testing.TB, db *sql.DB, table string) map[string]dbRow {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rs, err := db.QueryContext(ctx, `SELECT "key", "value", "version", "deleted" FROM "`+table+`"`)
	if err != nil {
		tb.Fatalf("read %s: %v", table, err)
	}
	defer rs.Close()
	out := make(map[string]dbRow)
	for rs.Next() {
		var (
			k string
			r dbRow
		)
		if err := rs.Scan(&k, &r.value, &r.version, &r.deleted); err != nil {
			tb.Fatalf("read %s: %v", table, err)
		}
		out[k] = r
	}
	if err := rs.Err(); err != nil {
		tb.Fatalf("read %s: %v", table, err)
	}
	return out
}

// newQueue returns a queue with a unique name and its group, and deletes the
// queue's keys when the test ends.
func newQueue(tb testing.TB, cfg *streamq.QueueConfig) *streamq.Queue {
	tb.Helper()
	return newQueueOn(tb, redistest.NewClient(tb), cfg)
}

// newQueueOn is newQueue on the Redis of rdb: heavy tests pass
// redistest.NewIsolatedClient, so that their load does not starve the
// package's other tests.
func newQueueOn(tb testing.TB, rdb *redis.Client, cfg *streamq.QueueConfig) *streamq.Queue {
	tb.Helper()
	q, err := streamq.NewQueue(rdb, redistest.Name(tb), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	if err := q.Setup(context.Background()); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { deleteQueueKeys(q) })
	return q
}

// deleteQueueKeys deletes every key of q (SCAN, bounded by the key count).
func deleteQueueKeys(q *streamq.Queue) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rdb := core.Of(q).RDB
	iter := rdb.Scan(ctx, 0, core.Of(q).Keys.Part("*"), 1000).Iterator()
	var batch []string
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == 1000 {
			rdb.Unlink(ctx, batch...)
			batch = batch[:0]
		}
	}
	if len(batch) > 0 {
		rdb.Unlink(ctx, batch...)
	}
}

// newWriter returns a writer on q.
func newWriter(tb testing.TB, q *streamq.Queue, cfg *writebehind.WriterConfig) *writebehind.Writer {
	tb.Helper()
	w, err := writebehind.NewWriter(q, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return w
}

// newHandler returns a handler on sink, closed when the test ends (after the
// consumers started later, whose cleanups run first).
func newHandler(tb testing.TB, sink writebehind.Sink, cfg *writebehind.HandlerConfig) *writebehind.Handler {
	tb.Helper()
	h, err := writebehind.NewHandler(sink, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = h.Close() })
	return h
}

// consumerConfig is a consumer configuration for fast tests: batches of up to
// 2x500 changes, quick shutdown and retries. Fields set in cfg win.
func consumerConfig(cfg streamq.ConsumerConfig) *streamq.ConsumerConfig {
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 2 * writebehind.DefaultMaxBatch
	}
	if cfg.Block == 0 {
		cfg.Block = 50 * time.Millisecond
	}
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = 10 * time.Second
	}
	if cfg.Backoff == nil {
		cfg.Backoff = streamq.ExponentialBackoff(10*time.Millisecond, 200*time.Millisecond)
	}
	return &cfg
}

// runConsumer starts a consumer of q with handler h and stops it when the test
// ends (or when the returned function is called), failing the test if Run
// returns an error or does not return within 30 s.
func runConsumer(tb testing.TB, q *streamq.Queue, h streamq.Handler, cfg *streamq.ConsumerConfig) (*streamq.Consumer, func()) {
	tb.Helper()
	c, err := streamq.NewConsumer(q, h, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	r := redistest.Background(tb, "Consumer.Run", 30*time.Second, c.Run)
	return c, func() { _ = r.Stop() } // an error fails the test at its end
}

// drained reports whether every change of q has been handled to the end:
// nothing pending, nothing undelivered, nothing waiting for a retry. It reads
// the group, the delayed set and the stream in one MULTI, so that a job moving
// between them cannot be missed.
func drained(ctx context.Context, q *streamq.Queue) (bool, error) {
	var (
		groups *redis.XInfoGroupsCmd
		stream *redis.XInfoStreamCmd
		delay  *redis.IntCmd
	)
	_, err := core.Of(q).RDB.TxPipelined(ctx, func(p redis.Pipeliner) error {
		groups = p.XInfoGroups(ctx, core.Of(q).Keys.Stream)
		stream = p.XInfoStream(ctx, core.Of(q).Keys.Stream)
		delay = p.ZCard(ctx, core.Of(q).Keys.Delayed)
		return nil
	})
	if err != nil {
		return false, err
	}
	if delay.Val() != 0 {
		return false, nil
	}
	for _, g := range groups.Val() {
		if g.Name != q.Group() {
			continue
		}
		if g.Pending != 0 {
			return false, nil
		}
		if g.Lag == 0 {
			return true, nil
		}
		// Lag is unknown (-1) after deletions: compare IDs instead.
		return !idLess(g.LastDeliveredID, stream.Val().LastGeneratedID), nil
	}
	return false, nil
}

// idLess compares two stream IDs "ms-seq".
func idLess(a, b string) bool {
	am, as, _ := strings.Cut(a, "-")
	bm, bs, _ := strings.Cut(b, "-")
	ami, _ := strconv.ParseUint(am, 10, 64)
	bmi, _ := strconv.ParseUint(bm, 10, 64)
	if ami != bmi {
		return ami < bmi
	}
	asi, _ := strconv.ParseUint(as, 10, 64)
	bsi, _ := strconv.ParseUint(bs, 10, 64)
	return asi < bsi
}

// waitDrained waits until q is drained (see drained).
func waitDrained(t testing.TB, q *streamq.Queue) {
	t.Helper()
	redistest.WaitFor(t, drainTimeout, "queue "+q.Name()+" drained (pending 0, lag 0, delayed 0)", func() bool {
		ok, err := drained(context.Background(), q)
		return err == nil && ok
	})
}

// want is what a test expects of one key after its last change.
type want struct {
	value   []byte // for a hash, its fields as writebehind.EncodeFields encodes them
	deleted bool
	hash    bool // cached as a hash (SetFields), not a string
	version int64
}

// readCache returns the cached values of keys: strings as they are, hashes
// as their canonical JSON (writebehind.EncodeFields), and which keys are
// hashes. Keys not in the cache are absent.
func readCache(t testing.TB, w *writebehind.Writer, keys []string) (cached, hashes map[string][]byte) {
	t.Helper()
	ctx := context.Background()
	cacheKeys := make([]string, len(keys))
	for i, k := range keys {
		cacheKeys[i] = w.CacheKey(k)
	}
	cached = make(map[string][]byte, len(keys))
	for start := 0; start < len(cacheKeys); start += 500 {
		end := min(start+500, len(cacheKeys))
		vals, err := core.Of(w.Queue()).RDB.MGet(ctx, cacheKeys[start:end]...).Result()
		if err != nil {
			t.Fatalf("MGET: %v", err)
		}
		for i, v := range vals {
			if s, ok := v.(string); ok {
				cached[keys[start+i]] = []byte(s)
			}
		}
	}
	// MGET answers nil for hashes: find them with TYPE and read them with
	// HGETALL, as their canonical JSON.
	hashes = cachedHashes(t, w, keys)
	for k, v := range hashes {
		if _, dup := cached[k]; dup {
			t.Fatalf("key %q is both a string and a hash", k)
		}
		cached[k] = v
	}
	return cached, hashes
}

// checkCache asserts that the cache holds exactly the expected final state:
// live keys with their values (as strings or hashes), deleted keys absent.
func checkCache(t testing.TB, w *writebehind.Writer, expect map[string]want) {
	t.Helper()
	keys := slices.Sorted(maps.Keys(expect))
	cached, hashes := readCache(t, w, keys)
	bad := 0
	for _, k := range keys {
		e := expect[k]
		c, inCache := cached[k]
		_, isHash := hashes[k]
		switch {
		case e.deleted && inCache:
			t.Errorf("key %q: deleted at version %d but cached as %q", k, e.version, c)
		case !e.deleted && (!inCache || !bytes.Equal(c, e.value) || isHash != e.hash):
			t.Errorf("key %q: cache holds %q (present %v, hash %v), want %q (hash %v)", k, c, inCache, isHash, e.value, e.hash)
		default:
			continue
		}
		if bad++; bad >= 20 {
			t.Fatalf("... stopping after %d mismatches", bad)
		}
	}
}

// checkConsistent asserts that the sink's rows, the cache and the expected
// final state agree exactly: live keys have the expected value in the cache
// and in the table, with the expected version; deleted keys are absent from
// the cache and are tombstones (or absent) in the table; and the table holds
// no live key the test did not write.
func checkConsistent(t testing.TB, w *writebehind.Writer, rows map[string]dbRow, expect map[string]want) {
	t.Helper()
	keys := make([]string, 0, len(expect))
	for k := range expect {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	cached, hashes := readCache(t, w, keys)
	bad := 0
	report := func(format string, args ...any) {
		bad++
		if bad <= 20 {
			t.Errorf(format, args...)
		}
	}
	live := 0
	for _, k := range keys {
		e := expect[k]
		r, inDB := rows[k]
		c, inCache := cached[k]
		if e.deleted {
			if inCache {
				report("key %q: deleted at version %d but cached as %q", k, e.version, c)
			}
			if inDB && !r.deleted {
				report("key %q: deleted at version %d but the table holds %q (version %d)", k, e.version, r.value, r.version)
			}
			if inDB && r.version != e.version {
				report("key %q: tombstone version %d, want %d", k, r.version, e.version)
			}
			continue
		}
		live++
		if _, isHash := hashes[k]; inCache && isHash != e.hash {
			report("key %q: cached as a hash: %v, want %v", k, isHash, e.hash)
		}
		if !inCache || !bytes.Equal(c, e.value) {
			report("key %q: cache holds %q (present %v), want %q", k, c, inCache, e.value)
		}
		if !inDB || r.deleted || !bytes.Equal(r.value, e.value) || r.version != e.version {
			report("key %q: table holds %q version %d deleted %v (present %v), want %q version %d", k, r.value, r.version, r.deleted, inDB, e.value, e.version)
		}
	}
	for k, r := range rows {
		if _, ok := expect[k]; !ok && !r.deleted {
			report("key %q: in the table (%q) but never written by the test", k, r.value)
		}
	}
	if bad > 20 {
		t.Errorf("... %d mismatches in all", bad)
	}
	if bad == 0 {
		t.Logf("database == cache: %d keys (%d live, %d deleted)", len(keys), live, len(keys)-live)
	}
}

// cachedHashes returns the cache entries of keys that are hashes, as their
// canonical JSON (writebehind.EncodeFields). It pipelines TYPE and HGETALL.
func cachedHashes(t testing.TB, w *writebehind.Writer, keys []string) map[string][]byte {
	t.Helper()
	ctx := context.Background()
	rdb := core.Of(w.Queue()).RDB
	out := make(map[string][]byte)
	for start := 0; start < len(keys); start += 500 {
		chunk := keys[start:min(start+500, len(keys))]
		types := make([]*redis.StatusCmd, len(chunk))
		if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, k := range chunk {
				types[i] = p.Type(ctx, w.CacheKey(k))
			}
			return nil
		}); err != nil {
			t.Fatalf("TYPE: %v", err)
		}
		for i, k := range chunk {
			if types[i].Val() != "hash" {
				continue
			}
			fields, found, err := w.GetFields(ctx, k)
			if err != nil || !found {
				t.Fatalf("GetFields(%q) = %v, %v, %v after TYPE said hash", k, fields, found, err)
			}
			out[k] = encodeFields(t, fields)
		}
	}
	return out
}

// encodeFields is writebehind.EncodeFields for fields known to be valid.
func encodeFields(t testing.TB, fields map[string]string) []byte {
	t.Helper()
	b, err := writebehind.EncodeFields(fields)
	if err != nil {
		t.Fatalf("EncodeFields(%v): %v", fields, err)
	}
	return b
}

// workload writes n random changes over nkeys keys with g goroutines (see
// runWorkload) and fails the test on error. Call it from the test goroutine.
func workload(t testing.TB, w *writebehind.Writer, n, nkeys, g, delPercent int, stop <-chan struct{}) map[string]want {
	t.Helper()
	expect, err := runWorkload(w, n, nkeys, g, delPercent, stop)
	if err != nil {
		t.Fatal(err)
	}
	return expect
}

// hashWorkload is workload with hashPercent percent of the changes written
// as hashes (Writer.SetFields), the others split between deletions
// (delPercent) and strings (Writer.Set). Keys switch between the two types.
func hashWorkload(t testing.TB, w *writebehind.Writer, n, nkeys, g, delPercent, hashPercent int) map[string]want {
	t.Helper()
	expect, err := runWorkloadMix(w, n, nkeys, g, delPercent, hashPercent, nil)
	if err != nil {
		t.Fatal(err)
	}
	return expect
}

// runWorkload writes n random changes over nkeys keys with g goroutines: each
// goroutine owns the keys i with i%g == its index, so the last change of every
// key is known. About delPercent percent of the changes are deletions. It
// returns the expected final state of the keys written. stop, when not nil,
// ends the writes early once closed.
func runWorkload(w *writebehind.Writer, n, nkeys, g, delPercent int, stop <-chan struct{}) (map[string]want, error) {
	return runWorkloadMix(w, n, nkeys, g, delPercent, 0, stop)
}

// randomFields returns 1 to 6 fields with values that exercise the JSON
// encoding: quotes, backslashes, HTML characters, control characters and
// non-ASCII text.
func randomFields(r *rand.Rand, key string, i int) map[string]string {
	odd := []string{`"quoted"`, `back\slash`, "<b>&amp;</b>", "tab\tnew\nline\x01", "Grüße, 世界 🚀", ""}
	fields := map[string]string{"id": key, "seq": strconv.Itoa(i)}
	for range r.IntN(5) {
		fields[fmt.Sprintf("f%d", r.IntN(8))] = odd[r.IntN(len(odd))] + strconv.FormatUint(r.Uint64()%1000, 10)
	}
	return fields
}

// runWorkloadMix is runWorkload with hashPercent percent of the changes
// written with Writer.SetFields.
func runWorkloadMix(w *writebehind.Writer, n, nkeys, g, delPercent, hashPercent int, stop <-chan struct{}) (map[string]want, error) {
	ctx := context.Background()
	results := make([]map[string]want, g)
	errs := make(chan error, g)
	var wg sync.WaitGroup
	for gi := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(rand.Uint64(), uint64(gi)))
			mine := make(map[string]want)
			results[gi] = mine
			for i := gi; i < n; i += g {
				if stop != nil {
					select {
					case <-stop:
						return
					default:
					}
				}
				k := r.IntN(max(nkeys/g, 1))*g + gi
				if k >= nkeys {
					k = gi % nkeys
				}
				key := fmt.Sprintf("key:%04d", k)
				roll := r.IntN(100)
				if roll < delPercent {
					v, err := w.Delete(ctx, key)
					if err != nil {
						errs <- fmt.Errorf("Delete(%q): %w", key, err)
						return
					}
					mine[key] = want{deleted: true, version: v}
					continue
				}
				if roll < delPercent+hashPercent {
					fields := randomFields(r, key, i)
					v, err := w.SetFields(ctx, key, fields)
					if err != nil {
						errs <- fmt.Errorf("SetFields(%q): %w", key, err)
						return
					}
					value, err := writebehind.EncodeFields(fields)
					if err != nil {
						errs <- fmt.Errorf("EncodeFields: %w", err)
						return
					}
					mine[key] = want{value: value, hash: true, version: v}
					continue
				}
				value := fmt.Appendf(nil, "%s=%d/%x", key, i, r.Uint64())
				v, err := w.Set(ctx, key, value)
				if err != nil {
					errs <- fmt.Errorf("Set(%q): %w", key, err)
					return
				}
				mine[key] = want{value: value, version: v}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	expect := make(map[string]want)
	for _, m := range results {
		for k, v := range m {
			expect[k] = v
		}
	}
	return expect, nil
}

// deadLetters returns the number of dead letters of q.
func deadLetters(t testing.TB, q *streamq.Queue) int64 {
	t.Helper()
	s, err := q.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s.DeadLetters
}
