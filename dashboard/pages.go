package dashboard

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/streamq/streamq/inspect"
	"github.com/streamq/streamq/internal/rdb"
)

const (
	// chartMinutes is how many minutes the throughput charts show.
	chartMinutes = 30
	// maxQueues bounds the queues the overview reads.
	maxQueues = 500
	// defaultLimit and maxLimit bound the jobs of one listing page.
	defaultLimit, maxLimit = 50, 1000
	// pageTimeout bounds the Redis work of one page.
	pageTimeout = 10 * time.Second
)

// routes registers every page and action on s.mux.
func (s *server) routes() {
	m := s.mux
	m.HandleFunc("GET /{$}", s.overview)
	m.HandleFunc("GET /static/{file}", s.serveStatic)
	m.HandleFunc("GET /schedules", s.schedules)
	m.HandleFunc("GET /redis", s.redis)
	m.HandleFunc("GET /queues/{queue}", s.queue)
	m.HandleFunc("GET /queues/{queue}/jobs/{id}", s.job)
	m.HandleFunc("GET /queues/{queue}/dead", s.dead)
	m.HandleFunc("GET /queues/{queue}/consumers", s.consumers)
	m.HandleFunc("GET /queues/{queue}/priority", s.priority)
	m.HandleFunc("GET /queues/{queue}/writebehind", s.writeBehind)
	m.HandleFunc("GET /queues/{queue}/history", s.history)
	m.HandleFunc("GET /queues/{queue}/flow", s.flow)
	m.HandleFunc("GET /queues/{queue}/partitions", s.partitions)
	m.HandleFunc("GET /outbox", s.outbox)
	m.HandleFunc("POST /queues/{queue}/flow", s.action("flow-limits", s.setFlow))
	m.HandleFunc("POST /queues/{queue}/{action}", s.action("", s.queueAction))
	m.HandleFunc("POST /queues/{queue}/delete", s.action("delete-queue", s.deleteQueue))
	m.HandleFunc("POST /queues/{queue}/jobs/{id}/{action}", s.action("", s.jobAction))
	m.HandleFunc("POST /queues/{queue}/dead/{action}", s.action("dead-", s.bulkAction))
	m.HandleFunc("POST /queues/{queue}/bulk/{action}", s.action("bulk-", s.stateBulkAction))
	m.HandleFunc("GET /workflows", s.workflows)
	m.HandleFunc("GET /workflows/{workflow}", s.workflow)
	m.HandleFunc("POST /workflows/{workflow}/{action}", s.action("workflow-", s.workflowAction))
	m.HandleFunc("POST /login", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, s.opts.BasePath+"/", http.StatusSeeOther)
	})
	m.HandleFunc("POST /logout", s.logout)
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.render(w, r, http.StatusNotFound, "error", &view{Title: "Not found", Error: "no such page: " + r.URL.Path})
	})
}

// fail answers with the page for err: 404 for what does not exist (with close
// names), 409 for a job in the wrong state, 500 otherwise (logged).
func (s *server) fail(w http.ResponseWriter, r *http.Request, err error) {
	v := &view{Title: "Error", Error: err.Error()}
	var nf *inspect.NotFoundError
	var se *inspect.StateError
	status := http.StatusInternalServerError
	switch {
	case errors.As(err, &nf):
		status = http.StatusNotFound
		v.Title = "Not found"
		v.Data = nf
	case errors.As(err, &se), errors.Is(err, inspect.ErrQueueInUse):
		status = http.StatusConflict
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		status = http.StatusServiceUnavailable
	case errors.Is(err, errBadRequest), errors.Is(err, inspect.ErrInvalidCursor), errors.Is(err, inspect.ErrUnknownReason):
		status = http.StatusBadRequest
	default:
		s.log.ErrorContext(r.Context(), "dashboard: request failed", "method", r.Method, "path", r.URL.Path, "error", err)
	}
	s.render(w, r, status, "error", v)
}

// errBadRequest marks errors in what the user typed.
var errBadRequest = errors.New("bad request")

// badRequest is an error in the request, answered with 400.
type badRequest string

func (e badRequest) Error() string        { return string(e) }
func (e badRequest) Is(target error) bool { return target == errBadRequest }

// here is the path and query of r as the user sees it (with BasePath),
// without the partial flag: where actions and the live refresh go back to.
func (s *server) here(r *http.Request, extra url.Values) string {
	q := r.URL.Query()
	q.Del("partial")
	for k, v := range extra {
		q[k] = v
	}
	p := s.opts.BasePath + r.URL.EscapedPath()
	if e := q.Encode(); e != "" {
		p += "?" + e
	}
	return p
}

// live returns the URL the script fetches to refresh this page's live part.
func (s *server) live(r *http.Request) string {
	return s.here(r, url.Values{"partial": {"1"}})
}

// openQueue returns the queue named in the path and its overview.
func (s *server) openQueue(ctx context.Context, r *http.Request) (*inspect.Queue, *inspect.Overview, error) {
	q, err := s.in.Queue(ctx, r.PathValue("queue"))
	if err != nil {
		return nil, nil, err
	}
	ov, err := s.ovs.get(ctx, q)
	if err != nil {
		return nil, nil, err
	}
	return q, ov, nil
}

// overviewRow is one queue of the overview page.
type overviewRow struct {
	Info     inspect.QueueInfo
	Overview *inspect.Overview
	Points   []inspect.Point
	Err      string
	// PartOf is the partitioned queue this one is a partition of (k ≥ 1);
	// Partitioned is set on a queue whose partitions are listed too.
	PartOf      string
	Partitioned bool
}

// overviewData is the overview page.
type overviewData struct {
	Rows      []overviewRow
	Truncated int  // queues not shown
	Estimated bool // some counts are estimated (Overview.Estimated)
	// Outboxes is the backlog of each outbox table (Options.Outboxes).
	Outboxes []outboxRow
}

func (s *server) overview(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), pageTimeout)
	defer cancel()
	infos, err := s.in.Queues(ctx)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	d := &overviewData{}
	if len(infos) > maxQueues {
		d.Truncated = len(infos) - maxQueues
		infos = infos[:maxQueues]
	}
	d.Rows = make([]overviewRow, len(infos))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i, info := range infos {
		d.Rows[i].Info = info
		g.Go(func() error {
			row := &d.Rows[i]
			q, err := s.in.Queue(gctx, info.Name)
			if err == nil {
				s.rollUp(gctx, q)
				row.Overview, err = s.ovs.get(gctx, q)
			}
			if err == nil {
				row.Points, err = q.Throughput(gctx, chartMinutes)
			}
			if err != nil {
				// One broken queue does not hide the others.
				row.Err = err.Error()
			}
			return nil
		})
	}
	if len(s.opts.Outboxes) > 0 {
		g.Go(func() error {
			d.Outboxes = s.outboxBacklogs(gctx)
			return nil
		})
	}
	_ = g.Wait()
	markPartitions(d.Rows)
	for _, row := range d.Rows {
		d.Estimated = d.Estimated || (row.Overview != nil && row.Overview.Estimated)
	}
	s.render(w, r, http.StatusOK, "overview", &view{Title: "Queues", Tab: "overview", LiveURL: s.live(r), Data: d})
}

// queueData is the jobs page of a queue.
type queueData struct {
	Overview *inspect.Overview
	Points   []inspect.Point
	State    inspect.State
	States   []stateTab
	Page     *inspect.Page
	Rows     []jobRow
	// the search
	ID, Header, Grep string
	Kind, Tag        string
	// Kinds is set when a job of the page has a kind: the table shows the
	// column.
	Kinds             bool
	Limit             int
	Cursor            string
	NextURL, FirstURL string
	Message           string
	Similar           []string
	// Completed is what the queue keeps of its completed jobs, read for
	// the completed tab (a zero Retention: none, and the tab says how to
	// keep them).
	Completed inspect.CompletedRetention
}

// stateTab is one state link with its count.
type stateTab struct {
	State  inspect.State
	Count  int64
	Approx bool // a lower bound (Overview.Estimated, for waiting jobs)
	URL    string
}

// jobRow is one job of a list.
type jobRow struct {
	Job     inspect.Job
	URL     string
	Preview string
}

func (s *server) queue(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), pageTimeout)
	defer cancel()
	q, ov, err := s.openQueue(ctx, r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	form := r.URL.Query()
	d := &queueData{Overview: ov, ID: strings.TrimSpace(form.Get("id")), Header: strings.TrimSpace(form.Get("header")), Grep: form.Get("q"), Cursor: form.Get("cursor"),
		Kind: strings.TrimSpace(form.Get("kind")), Tag: strings.TrimSpace(form.Get("tag"))}
	d.State = inspect.StateWaiting
	if st := form.Get("state"); st != "" {
		if d.State, err = inspect.ParseState(st); err != nil {
			s.fail(w, r, badRequest(err.Error()))
			return
		}
	}
	if d.Limit, err = parseLimit(form.Get("limit")); err != nil {
		s.fail(w, r, err)
		return
	}
	if d.ID != "" && form.Get("partial") != "1" { // a live refresh does not search again
		job, err := q.Job(ctx, d.ID)
		var nf *inspect.NotFoundError
		switch {
		case err == nil:
			http.Redirect(w, r, pathOf(s.opts.BasePath, "queues", q.Name(), "jobs", job.ID), http.StatusSeeOther)
			return
		case errors.As(err, &nf):
			d.Message = "No job with ID " + d.ID + " in queue " + q.Name() + "."
			d.Similar = nf.Similar
		default:
			s.fail(w, r, err)
			return
		}
	}
	opts := inspect.ListOptions{State: d.State, Cursor: d.Cursor, Limit: d.Limit, Grep: d.Grep, Kind: d.Kind}
	if d.Tag != "" {
		opts.Tags = []string{d.Tag}
	}
	if d.Header != "" {
		k, v, ok := strings.Cut(d.Header, "=")
		if !ok || strings.TrimSpace(k) == "" {
			s.fail(w, r, badRequest("header search must look like name=value"))
			return
		}
		opts.Header = map[string]string{strings.TrimSpace(k): strings.TrimSpace(v)}
	}
	if d.State == inspect.StateCompleted && (d.Header != "" || d.Tag != "") {
		s.fail(w, r, badRequest("completed jobs keep no headers or tags: search them by ID, kind or payload"))
		return
	}
	if (d.Grep != "" || d.Header != "") && s.opts.HidePayloads {
		s.fail(w, r, badRequest("payloads and headers are hidden on this dashboard: search by payload and by header is off"))
		return
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) {
		d.Page, err = q.Jobs(gctx, opts)
		return err
	})
	g.Go(func() (err error) {
		d.Points, err = q.Throughput(gctx, chartMinutes)
		return err
	})
	if d.State == inspect.StateCompleted {
		g.Go(func() (err error) {
			d.Completed, err = q.CompletedRetention(gctx)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		s.fail(w, r, err)
		return
	}
	base := pathOf(s.opts.BasePath, "queues", q.Name())
	tabs := []inspect.State{inspect.StateWaiting, inspect.StateRunning, inspect.StateDelayed, inspect.StateRetrying, inspect.StateDead, inspect.StateCancelled}
	if q.Kind() != inspect.KindPriority { // priority queues keep no completed jobs
		tabs = append(tabs, inspect.StateCompleted)
	}
	for _, st := range tabs {
		approx := ov.Estimated && st == inspect.StateWaiting
		d.States = append(d.States, stateTab{State: st, Count: ov.Count(st), Approx: approx, URL: base + "?state=" + string(st)})
	}
	d.Rows = s.jobRows(q.Name(), d.Page.Jobs)
	d.Kinds = slices.ContainsFunc(d.Page.Jobs, func(j inspect.Job) bool { return j.Kind != "" })
	keep := url.Values{"state": {string(d.State)}}
	for k, v := range map[string]string{"header": d.Header, "q": d.Grep, "kind": d.Kind, "tag": d.Tag} {
		if v != "" {
			keep.Set(k, v)
		}
	}
	if d.Limit != defaultLimit {
		keep.Set("limit", strconv.Itoa(d.Limit))
	}
	d.FirstURL = base + "?" + keep.Encode()
	if d.Page.Cursor != "" {
		keep.Set("cursor", d.Page.Cursor)
		d.NextURL = base + "?" + keep.Encode()
	}
	s.render(w, r, http.StatusOK, "queue", &view{Title: q.Name(), Queue: ov, Tab: "jobs", LiveURL: s.live(r), Next: s.here(r, nil), Data: d})
}

// jobRows makes the rows of a job list.
func (s *server) jobRows(queue string, jobs []inspect.Job) []jobRow {
	rows := make([]jobRow, len(jobs))
	for i, j := range jobs {
		rows[i] = jobRow{Job: j, URL: pathOf(s.opts.BasePath, "queues", queue, "jobs", j.ID)}
		if !s.opts.HidePayloads {
			rows[i].Preview = escapedBytes(j.Payload, 80)
		}
	}
	return rows
}

// parseLimit reads the page size.
func parseLimit(v string) (int, error) {
	if v == "" {
		return defaultLimit, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxLimit {
		return 0, badRequest("limit must be a number from 1 to " + strconv.Itoa(maxLimit))
	}
	return n, nil
}

// jobData is the page of one job.
type jobData struct {
	Job                   *inspect.Job
	Payload, PayloadKind  string
	Result, ResultKind    string
	Headers               [][2]string
	CanCancel, CanDelete  bool
	CanRunNow, CanRequeue bool
	QueueURL              string
	// Why lists why a waiting, delayed or retrying job has not started,
	// each reason with its evidence (inspect.Queue.Explain).
	Why []inspect.WaitReason
}

func (s *server) job(w http.ResponseWriter, r *http.Request) {
	// An ID a partitioned producer gave ("p3~1700000000000-0") names its
	// partition: its page is that partition's page of the ID within it.
	if k, bare, ok := rdb.SplitPartitionJobID(r.PathValue("id")); ok {
		http.Redirect(w, r, pathOf(s.opts.BasePath, "queues", rdb.PartitionName(r.PathValue("queue"), k), "jobs", bare), http.StatusSeeOther)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), pageTimeout)
	defer cancel()
	q, ov, err := s.openQueue(ctx, r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	j, err := q.Job(ctx, r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	d := &jobData{Job: j, QueueURL: pathOf(s.opts.BasePath, "queues", q.Name())}
	if !s.opts.HidePayloads {
		d.Payload, d.PayloadKind = pretty(j.Payload)
		if j.Result != nil {
			d.Result, d.ResultKind = pretty(j.Result)
		}
		for k, v := range j.Headers {
			d.Headers = append(d.Headers, [2]string{k, v})
		}
	}
	slices.SortFunc(d.Headers, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
	if d.Why, err = s.explain(ctx, q, j); err != nil {
		s.fail(w, r, err)
		return
	}
	switch j.State {
	case inspect.StateRunning:
		d.CanCancel = true
	case inspect.StateWaiting:
		d.CanDelete = true
	case inspect.StateDelayed, inspect.StateRetrying:
		d.CanDelete, d.CanRunNow = true, true
	case inspect.StateDead, inspect.StateCancelled:
		d.CanDelete, d.CanRequeue = true, true
	}
	s.render(w, r, http.StatusOK, "job", &view{Title: "Job " + j.ID, Queue: ov, Tab: "jobs", LiveURL: s.live(r), Next: s.here(r, nil), Data: d})
}

// deadData is the dead-letter page of a queue.
type deadData struct {
	State                       inspect.State
	Reason, Error, Since, Until string
	Count                       int
	Partial                     bool // Count is a lower bound
	Rows                        []jobRow
	Scanned                     int
	Cursor, NextURL, FirstURL   string
	Hidden                      url.Values // the filter, for the bulk forms
	Reasons                     []string
}

// deadFilter reads the filter of the dead-letter page or a bulk action.
func (s *server) deadFilter(form url.Values) (inspect.DeadFilter, error) {
	f := inspect.DeadFilter{Reason: strings.TrimSpace(form.Get("reason")), Error: form.Get("error")}
	var err error
	if f.Reason != "" {
		if _, err := inspect.ParseReason(f.Reason); err != nil {
			return f, err
		}
	}
	if f.Error != "" && s.opts.HidePayloads {
		return f, badRequest("errors are hidden on this dashboard: the filter by error text is off")
	}
	if f.Since, err = parseTime(form.Get("since")); err != nil {
		return f, err
	}
	if f.Until, err = parseTime(form.Get("until")); err != nil {
		return f, err
	}
	for _, id := range form["id"] {
		if id = strings.TrimSpace(id); id != "" {
			f.IDs = append(f.IDs, id)
		}
	}
	if len(f.IDs) > maxLimit {
		return f, badRequest("select at most " + strconv.Itoa(maxLimit) + " jobs at once, or use a filter")
	}
	return f, nil
}

// countDead counts the dead letters f selects. Without a filter it is the
// length of the dead-letter stream; with one, CountDead examines at most
// inspect.DefaultScanLimit entries, so on a longer stream the count is a
// lower bound (partial), while a bulk action walks them all.
func countDead(ctx context.Context, q *inspect.Queue, ov *inspect.Overview, f inspect.DeadFilter) (n int, partial bool, err error) {
	total := ov.Dead + ov.Cancelled
	if f.Reason == "" && f.Error == "" && f.Since.IsZero() && f.Until.IsZero() && len(f.IDs) == 0 {
		return int(total), false, nil
	}
	n, err = q.CountDead(ctx, f)
	return n, err == nil && len(f.IDs) == 0 && total > inspect.DefaultScanLimit, err
}

// parseTime reads a time typed in a datetime-local field (UTC) or RFC 3339.
func parseTime(v string) (time.Time, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return time.Time{}, nil
	}
	for _, layout := range []string{time.RFC3339, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, v, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, badRequest("time " + strconv.Quote(v) + " must look like 2006-01-02T15:04 (UTC) or RFC 3339")
}

func (s *server) dead(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), pageTimeout)
	defer cancel()
	q, ov, err := s.openQueue(ctx, r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	form := r.URL.Query()
	f, err := s.deadFilter(form)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	f.IDs = nil
	d := &deadData{State: inspect.StateDead, Reason: f.Reason, Error: f.Error, Since: form.Get("since"), Until: form.Get("until"),
		Reasons: inspect.Reasons(), Cursor: form.Get("cursor")}
	if form.Get("state") == string(inspect.StateCancelled) {
		d.State = inspect.StateCancelled
	}
	limit, err := parseLimit(form.Get("limit"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	d.Hidden = url.Values{}
	for k, v := range map[string]string{"reason": f.Reason, "error": f.Error, "since": d.Since, "until": d.Until} {
		if v != "" {
			d.Hidden.Set(k, v)
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) {
		d.Count, d.Partial, err = countDead(gctx, q, ov, f)
		return err
	})
	var page *inspect.Page
	g.Go(func() (err error) {
		page, err = q.Jobs(gctx, inspect.ListOptions{State: d.State, Cursor: d.Cursor, Limit: limit, Dead: f})
		return err
	})
	if err := g.Wait(); err != nil {
		s.fail(w, r, err)
		return
	}
	d.Scanned = page.Scanned
	jobs, cursor := page.Jobs, page.Cursor
	d.Rows = s.jobRows(q.Name(), jobs)
	base := pathOf(s.opts.BasePath, "queues", q.Name(), "dead")
	keep := url.Values{}
	for k, v := range d.Hidden {
		keep[k] = v
	}
	if d.State == inspect.StateCancelled {
		keep.Set("state", string(d.State))
	}
	if limit != defaultLimit {
		keep.Set("limit", strconv.Itoa(limit))
	}
	d.FirstURL = base + "?" + keep.Encode()
	if cursor != "" {
		keep.Set("cursor", cursor)
		d.NextURL = base + "?" + keep.Encode()
	}
	s.render(w, r, http.StatusOK, "dead", &view{Title: q.Name() + ": dead letters", Queue: ov, Tab: "dead", Next: s.here(r, nil), Data: d})
}

func (s *server) consumers(w http.ResponseWriter, r *http.Request) {
	s.queueTab(w, r, "consumers", "consumers", true, func(ctx context.Context, q *inspect.Queue, _ *inspect.Overview) (any, error) {
		return q.Consumers(ctx)
	})
}

func (s *server) priority(w http.ResponseWriter, r *http.Request) {
	s.queueTab(w, r, "priority", "priorities", false, func(ctx context.Context, q *inspect.Queue, _ *inspect.Overview) (any, error) {
		if q.Kind() != inspect.KindPriority {
			return []inspect.Level(nil), nil
		}
		return q.Levels(ctx)
	})
}

func (s *server) writeBehind(w http.ResponseWriter, r *http.Request) {
	s.queueTab(w, r, "writebehind", "write-behind", false, func(ctx context.Context, q *inspect.Queue, ov *inspect.Overview) (any, error) {
		if !ov.WriteBehind {
			return (*inspect.WriteBehindStatus)(nil), nil
		}
		return q.WriteBehind(ctx)
	})
}

// queueTab renders the tab page of one queue whose data load reads (with
// next set to this page when actions on it return here).
func (s *server) queueTab(w http.ResponseWriter, r *http.Request, tab, title string, next bool,
	load func(context.Context, *inspect.Queue, *inspect.Overview) (any, error)) {
	ctx, cancel := context.WithTimeout(r.Context(), pageTimeout)
	defer cancel()
	q, ov, err := s.openQueue(ctx, r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	data, err := load(ctx, q, ov)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	v := &view{Title: q.Name() + ": " + title, Queue: ov, Tab: tab, LiveURL: s.live(r), Data: data}
	if next {
		v.Next = s.here(r, nil)
	}
	s.render(w, r, http.StatusOK, tab, v)
}

func (s *server) schedules(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), pageTimeout)
	defer cancel()
	sch, err := s.in.Schedules(ctx, r.URL.Query().Get("queue"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, "schedules", &view{Title: "Schedules", Tab: "schedules", LiveURL: s.live(r), Data: sch})
}

// historyData is the history page of a queue.
type historyData struct {
	Minutes, Hours *inspect.History
}

func (s *server) history(w http.ResponseWriter, r *http.Request) {
	s.queueTab(w, r, "history", "history", false, func(ctx context.Context, q *inspect.Queue, _ *inspect.Overview) (any, error) {
		s.rollUp(ctx, q)
		d := &historyData{}
		g, gctx := errgroup.WithContext(ctx)
		g.Go(func() (err error) {
			d.Minutes, err = q.History(gctx, inspect.MinuteHistory)
			return err
		})
		g.Go(func() (err error) {
			d.Hours, err = q.History(gctx, inspect.HourHistory)
			return err
		})
		return d, g.Wait()
	})
}

// rollUpEvery is how often the dashboard rolls a queue's minute counters up
// into its hour counters (inspect.Queue.RollUp), as its pages are read.
const rollUpEvery = time.Minute

// rollUp runs q.RollUp when the last one of this dashboard for q is older
// than rollUpEvery. A failure is logged: the history misses the minutes
// until a later roll-up succeeds.
func (s *server) rollUp(ctx context.Context, q *inspect.Queue) {
	now := s.now()
	s.rollMu.Lock()
	if s.rolled == nil {
		s.rolled = map[string]time.Time{}
	}
	if last, ok := s.rolled[q.Name()]; ok && now.Sub(last) < rollUpEvery {
		s.rollMu.Unlock()
		return
	}
	if len(s.rolled) >= maxQueues*2 {
		clear(s.rolled) // queues come and go: forget them all now and then
	}
	s.rolled[q.Name()] = now
	s.rollMu.Unlock()
	if err := q.RollUp(ctx); err != nil {
		s.log.WarnContext(ctx, "dashboard: roll up the history counters", "queue", q.Name(), "error", err)
	}
}

// redisData is the Redis page.
type redisData struct {
	Servers []inspect.RedisServer
}

func (s *server) redis(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), pageTimeout)
	defer cancel()
	ss, err := s.in.Redis(ctx)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, "redis", &view{Title: "Redis", Tab: "redis", LiveURL: s.live(r), Data: &redisData{Servers: ss}})
}
