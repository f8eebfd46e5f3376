package dashboard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/streamq/streamq/inspect"
)

const (
	// maxFormBytes bounds the body of an action.
	maxFormBytes = 64 << 10
	// actionTimeout bounds an action and the count of a bulk action's
	// confirmation.
	actionTimeout = 2 * time.Minute
	// bulkTimeout bounds the run of one bulk action.
	bulkTimeout = 30 * time.Minute
	// progressEvery is how often a bulk action's page shows its progress.
	progressEvery = 250 * time.Millisecond
)

// done is what an action did: the message to show, the page to go back to
// ("" = the page the form came from) and, for the audit log, how many jobs
// it touched (-1: not a count). A confirmed bulk action instead returns
// the bulk run to do, with a page that shows its progress.
type done struct {
	msg, next string
	count     int
	bulk      *bulkRun
	detail    string // for the audit log: what the action set
}

// bulkRun is a confirmed bulk action: the progress page's data and the run.
type bulkRun struct {
	Title string // "Delete 5000 waiting jobs of orders"
	Total int    // what the confirmation counted
	Back  string // the page to go back to
	// run does the action, calling progress with the jobs done so far, and
	// returns how many it did.
	run func(ctx context.Context, progress func(int)) (int, error)
	// result says what it did: "Deleted 5000 waiting jobs of orders."
	result func(n int) string
}

// actionFunc does one action. It returns nil (and no error) when it wrote a
// page of its own (a confirmation) and did nothing.
type actionFunc func(ctx context.Context, w http.ResponseWriter, r *http.Request, q *inspect.Queue) (*done, error)

// action wraps an action: it is refused in read-only mode and without a
// valid same-origin CSRF token, logged to the audit log, and redirects back
// with a message. prefix names the kind of action in the log ("dead-" for
// the bulk actions on dead letters).
func (s *server) action(prefix string, do actionFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		e := auditEntry{action: prefix + r.PathValue("action"), queue: r.PathValue("queue"), job: r.PathValue("id"), workflow: r.PathValue("workflow"), count: -1}
		if s.opts.ReadOnly {
			s.logAction(r, e, errReadOnly)
			s.render(w, r, http.StatusForbidden, "error", &view{Title: "Forbidden", Error: "this dashboard is read-only"})
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
		if err := r.ParseForm(); err != nil {
			s.fail(w, r, badRequest("bad form: "+err.Error()))
			return
		}
		if why := s.checkCSRF(r); why != "" {
			s.logAction(r, e, errors.New("refused: "+why))
			s.render(w, r, http.StatusForbidden, "error", &view{Title: "Forbidden", Error: "refused: " + why})
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), actionTimeout)
		defer cancel()
		var q *inspect.Queue // nil for an action on no queue (a workflow)
		if name := r.PathValue("queue"); name != "" {
			var err error
			if q, err = s.in.Queue(ctx, name); err != nil {
				s.fail(w, r, err)
				return
			}
		}
		res, err := do(ctx, w, r, q)
		if q != nil {
			s.ovs.forget(q.Name())
		}
		if res == nil && err == nil {
			return // the action wrote its own page (a confirmation)
		}
		switch prefix {
		case "dead-":
			e.filter = filterText(r.PostForm)
		case "bulk-":
			e.filter = "state=" + r.PostFormValue("state")
		}
		if err == nil && res.bulk != nil {
			s.runBulk(w, r, e, res.bulk)
			return
		}
		if res != nil {
			e.count, e.detail = res.count, res.detail
		}
		s.logAction(r, e, err)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if res.next == "" && q != nil {
			res.next = s.back(r, q.Name())
		}
		s.setFlash(w, r, res.msg)
		http.Redirect(w, r, res.next, http.StatusSeeOther)
	}
}

// errReadOnly is the audit log's reason for an action refused in read-only
// mode.
var errReadOnly = errors.New("refused: read-only")

// filterText describes the dead-letter filter of a bulk action's form.
func filterText(form url.Values) string {
	var parts []string
	for _, k := range []string{"reason", "error", "since", "until"} {
		if v := form.Get(k); v != "" {
			parts = append(parts, k+"="+strconv.Quote(v))
		}
	}
	if n := len(form["id"]); n > 0 {
		parts = append(parts, strconv.Itoa(n)+" chosen")
	}
	if len(parts) == 0 {
		return "all"
	}
	return strings.Join(parts, " ")
}

// back is the page an action returns to: the form's "next" field when it is
// a path of this dashboard, else the queue's page.
func (s *server) back(r *http.Request, queue string) string {
	n := r.PostFormValue("next")
	if strings.HasPrefix(n, s.opts.BasePath+"/") && !strings.HasPrefix(n, "//") && !strings.ContainsAny(n, "\\\r\n") {
		return n
	}
	return pathOf(s.opts.BasePath, "queues", queue)
}

// queueAction pauses or resumes a queue.
func (s *server) queueAction(ctx context.Context, _ http.ResponseWriter, r *http.Request, q *inspect.Queue) (*done, error) {
	switch r.PathValue("action") {
	case "pause":
		if err := q.Pause(ctx); err != nil {
			return nil, err
		}
		return &done{msg: "Paused queue " + q.Name() + ": consumers finish their running jobs and take no new ones.", count: -1}, nil
	case "resume":
		if err := q.Resume(ctx); err != nil {
			return nil, err
		}
		return &done{msg: "Resumed queue " + q.Name() + ".", count: -1}, nil
	}
	return nil, badRequest("unknown action " + r.PathValue("action"))
}

// jobAction cancels, deletes, runs now or requeues one job.
func (s *server) jobAction(ctx context.Context, _ http.ResponseWriter, r *http.Request, q *inspect.Queue) (*done, error) {
	id := r.PathValue("id")
	switch a := r.PathValue("action"); a {
	case "cancel":
		if err := q.Cancel(ctx, id); err != nil {
			return nil, err
		}
		return &done{msg: "Cancel requested for job " + id + ": its handler's context is cancelled within a control interval.", count: 1}, nil
	case "delete":
		if err := q.Delete(ctx, id); err != nil {
			return nil, err
		}
		return &done{msg: "Deleted job " + id + ".", next: pathOf(s.opts.BasePath, "queues", q.Name()), count: 1}, nil
	case "run":
		if err := q.RunNow(ctx, id); err != nil {
			return nil, err
		}
		return &done{msg: runNowMessage(q, id), count: 1}, nil
	case "requeue":
		n, err := q.RequeueDead(ctx, inspect.DeadFilter{IDs: []string{id}}, nil)
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return &done{msg: "Job " + id + " was not requeued: it is no longer a dead letter.", count: 0}, nil
		}
		return &done{msg: "Requeued job " + id + ".", count: 1}, nil
	default:
		return nil, badRequest("unknown action " + a)
	}
}

// runNowMessage says where a job made due by run now went.
func runNowMessage(q *inspect.Queue, id string) string {
	if q.Kind() == inspect.KindPriority {
		return "Job " + id + " is due now: it is back among the ready jobs at its priority."
	}
	return "Job " + id + " is due now: it joined the end of the waiting jobs (a stream only grows at its end), and runs when the jobs before it have started."
}

// confirmData is the confirmation page of a bulk action or of a queue's
// deletion.
type confirmData struct {
	// The question: "<Verb> [at least] <Count> <Noun> of <Queue>?"
	Verb, Noun, Queue string
	Count             int
	Partial           bool // Count is a lower bound: only Examined entries were examined
	Examined          int
	Dead              bool               // dead letters: say what the filter selects
	Filter            inspect.DeadFilter // of dead letters
	Notes, Warnings   []string
	Live              []inspect.Consumer // live consumers of a queue to delete
	Force             bool               // offer to delete although consumers are live
	PostURL           string
	Button            string
	Danger            bool
	Fields            [][2]string // hidden fields to post again
	CancelURL         string
}

// bulkAction requeues or purges the dead letters a filter selects. Without
// confirm=yes it shows how many that is and asks for confirmation.
func (s *server) bulkAction(ctx context.Context, w http.ResponseWriter, r *http.Request, q *inspect.Queue) (*done, error) {
	a := r.PathValue("action")
	if a != "requeue" && a != "purge" {
		return nil, badRequest("unknown action " + a)
	}
	f, err := s.deadFilter(r.PostForm)
	if err != nil {
		return nil, err
	}
	deadPage := pathOf(s.opts.BasePath, "queues", q.Name(), "dead")
	ov, err := q.Overview(ctx)
	if err != nil {
		return nil, err
	}
	n, partial, err := countDead(ctx, q, ov, f)
	if err != nil {
		return nil, err
	}
	verb := map[string]string{"requeue": "Requeue", "purge": "Purge"}[a]
	if r.PostFormValue("confirm") != "yes" {
		d := &confirmData{Verb: verb, Noun: noun(n, "dead letter", "dead letters"), Queue: q.Name(), Count: n, Partial: partial,
			Examined: inspect.DefaultScanLimit, Dead: true, Filter: f, CancelURL: deadPage, Danger: a == "purge",
			PostURL: pathOf(s.opts.BasePath, "queues", q.Name(), "dead", a)}
		d.Button = "Yes, " + a + " " + strconv.Itoa(n)
		if partial {
			d.Button = "Yes, " + a + " all matching"
			d.Warnings = append(d.Warnings, fmt.Sprintf("Counted over the first %d dead letters only: the action goes through all of them, so it may touch more.", inspect.DefaultScanLimit))
		}
		if a == "purge" {
			d.Warnings = append(d.Warnings, "Purged jobs are deleted for good.")
		} else {
			d.Notes = append(d.Notes, "Requeued jobs go back to the queue and run again.")
		}
		for _, k := range []string{"reason", "error", "since", "until"} {
			if v := r.PostFormValue(k); v != "" {
				d.Fields = append(d.Fields, [2]string{k, v})
			}
		}
		for _, id := range f.IDs {
			d.Fields = append(d.Fields, [2]string{"id", id})
		}
		s.render(w, r, http.StatusOK, "confirm", &view{Title: "Confirm " + a, Data: d})
		return nil, nil
	}
	past := map[string]string{"requeue": "Requeued", "purge": "Purged"}[a]
	return &done{bulk: &bulkRun{
		Title: fmt.Sprintf("%s %s of %s", verb, plural(n, "dead letter", "dead letters"), q.Name()), Total: n, Back: deadPage,
		run: func(ctx context.Context, progress func(int)) (int, error) {
			if a == "requeue" {
				return q.RequeueDead(ctx, f, progress)
			}
			return q.PurgeDead(ctx, f, progress)
		},
		result: func(n int) string { return fmt.Sprintf("%s %d dead letters of %s.", past, n, q.Name()) },
	}}, nil
}

// stateBulk is one bulk action on the jobs of a state.
type stateBulk struct {
	verb, past string // "Delete", "Deleted"
	states     []inspect.State
	run        func(q *inspect.Queue, ctx context.Context, st inspect.State, progress func(int)) (int, error)
	danger     bool
	note       string
}

// stateBulks are the bulk actions of the queue page, by the action in the
// path.
var stateBulks = map[string]stateBulk{
	"delete": {verb: "Delete", past: "Deleted", danger: true, run: (*inspect.Queue).DeleteAll,
		states: []inspect.State{inspect.StateWaiting, inspect.StateDelayed, inspect.StateRetrying},
		note:   "Deleted jobs are gone for good; a job a consumer takes meanwhile runs and is not deleted."},
	"run": {verb: "Run now", past: "Made due now", run: (*inspect.Queue).RunAllNow,
		states: []inspect.State{inspect.StateDelayed, inspect.StateRetrying},
		note:   "They join the end of the waiting jobs (a priority queue's go among the ready ones at their priority)."},
	"cancel": {verb: "Cancel", past: "Asked to cancel", danger: true,
		run: func(q *inspect.Queue, ctx context.Context, _ inspect.State, progress func(int)) (int, error) {
			return q.CancelAll(ctx, progress)
		},
		states: []inspect.State{inspect.StateRunning},
		note:   "Their handlers' contexts are cancelled within a control interval, and the jobs are dead-lettered as cancelled."},
}

// stateBulkAction deletes, runs now or cancels every job of a state. Without
// confirm=yes it shows how many there are and asks for confirmation.
func (s *server) stateBulkAction(ctx context.Context, w http.ResponseWriter, r *http.Request, q *inspect.Queue) (*done, error) {
	a := r.PathValue("action")
	b, ok := stateBulks[a]
	if !ok {
		return nil, badRequest("unknown action " + a + ": use delete, run or cancel")
	}
	st, err := inspect.ParseState(r.PostFormValue("state"))
	if err != nil || !slices.Contains(b.states, st) {
		return nil, badRequest(fmt.Sprintf("%s all takes the state %v, not %q", a, b.states, r.PostFormValue("state")))
	}
	n64, err := q.Count(ctx, st)
	if err != nil {
		return nil, err
	}
	n := int(n64)
	jobs := plural(n, string(st)+" job", string(st)+" jobs")
	back := pathOf(s.opts.BasePath, "queues", q.Name()) + "?state=" + string(st)
	if r.PostFormValue("confirm") != "yes" {
		d := &confirmData{Verb: b.verb, Noun: noun(n, string(st)+" job", string(st)+" jobs"), Queue: q.Name(), Count: n, Notes: []string{b.note}, Danger: b.danger,
			PostURL: pathOf(s.opts.BasePath, "queues", q.Name(), "bulk", a), Button: "Yes, " + strings.ToLower(b.verb) + " " + strconv.Itoa(n),
			Fields: [][2]string{{"state", string(st)}}, CancelURL: back}
		d.Notes = append(d.Notes, "It takes the jobs there are when it starts, 100 at a time, each checked and acted on in one step.")
		s.render(w, r, http.StatusOK, "confirm", &view{Title: "Confirm " + strings.ToLower(b.verb), Data: d})
		return nil, nil
	}
	return &done{bulk: &bulkRun{
		Title: fmt.Sprintf("%s %s of %s", b.verb, jobs, q.Name()), Total: n, Back: back,
		run: func(ctx context.Context, progress func(int)) (int, error) {
			return b.run(q, ctx, st, progress)
		},
		result: func(done int) string {
			return fmt.Sprintf("%s %s of %s.", b.past, plural(done, string(st)+" job", string(st)+" jobs"), q.Name())
		},
	}}, nil
}

// deleteQueue deletes the queue. Without confirm=yes it shows what the queue
// holds, its live consumers, and asks for confirmation.
func (s *server) deleteQueue(ctx context.Context, w http.ResponseWriter, r *http.Request, q *inspect.Queue) (*done, error) {
	force := r.PostFormValue("force") == "yes"
	if r.PostFormValue("confirm") != "yes" {
		ov, err := q.Overview(ctx)
		if err != nil {
			return nil, err
		}
		live, err := q.LiveConsumers(ctx, inspect.DefaultLiveWithin)
		if err != nil {
			return nil, err
		}
		jobs := int(ov.Waiting + ov.Running + ov.Delayed + ov.Retrying + ov.Dead + ov.Cancelled)
		d := &confirmData{Verb: "Delete queue " + q.Name() + " with its", Noun: "jobs", Count: jobs, Danger: true, Live: live, Force: len(live) > 0,
			PostURL: pathOf(s.opts.BasePath, "queues", q.Name(), "delete"), Button: "Yes, delete queue " + q.Name(),
			CancelURL: pathOf(s.opts.BasePath, "queues", q.Name())}
		d.Notes = append(d.Notes, fmt.Sprintf("Waiting %d, running %d, delayed %d, retrying %d, dead %d, cancelled %d; its schedules, counters and results go too, and it leaves the queue list.",
			ov.Waiting, ov.Running, ov.Delayed, ov.Retrying, ov.Dead, ov.Cancelled))
		d.Warnings = append(d.Warnings, "This cannot be undone.")
		if len(live) > 0 {
			d.Warnings = append(d.Warnings, "Consumers or workers of this queue are live (below): stop them first. Deleted anyway, the queue is made again by the next job a producer enqueues or a consumer reads.")
		}
		s.render(w, r, http.StatusOK, "confirm", &view{Title: "Delete queue " + q.Name(), Data: d})
		return nil, nil
	}
	n, err := s.in.DeleteQueue(ctx, q.Name(), &inspect.DeleteQueueOptions{Force: force})
	if err != nil {
		return nil, err
	}
	return &done{msg: fmt.Sprintf("Deleted queue %s (%d keys).", q.Name(), n), next: pathOf(s.opts.BasePath), count: n}, nil
}

// plural is "1 <one>" or "n <many>".
func plural(n int, one, many string) string {
	return strconv.Itoa(n) + " " + noun(n, one, many)
}

// noun is one when n is 1, else many.
func noun(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// runBulk runs a confirmed bulk action on a page that shows its progress
// as it goes (the page is written in parts, each flushed), then what it
// did, and logs it to the audit log. A client that goes away stops it
// between two batches.
func (s *server) runBulk(w http.ResponseWriter, r *http.Request, e auditEntry, b *bulkRun) {
	page, err := s.renderPage(w, r, "progress", &view{Title: b.Title, Data: b})
	if err != nil {
		s.logAction(r, e, err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	head, tail, _ := bytes.Cut(page, []byte(progressMarker))
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Now().Add(bulkTimeout + time.Minute)) // beyond the server's WriteTimeout
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("X-Accel-Buffering", "no") // nginx: pass the parts on as they come
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(head)
	_ = rc.Flush()
	ctx, cancel := context.WithTimeout(r.Context(), bulkTimeout)
	defer cancel()
	var last time.Time
	n, err := b.run(ctx, func(done int) {
		if now := time.Now(); now.Sub(last) >= progressEvery {
			last = now
			fmt.Fprintf(w, "<p class=\"step\"><progress max=\"%d\" value=\"%d\"></progress> %d of %d</p>\n", max(b.Total, done), done, done, b.Total)
			_ = rc.Flush()
		}
	})
	e.count = n
	s.logAction(r, e, err)
	var end string
	if err != nil {
		end = fmt.Sprintf("<p class=\"error\" id=\"bulk-error\">Stopped after %d: %s</p>", n, html.EscapeString(err.Error()))
	} else {
		end = fmt.Sprintf("<p class=\"flash\" role=\"status\" id=\"bulk-done\">%s</p>", html.EscapeString(b.result(n)))
	}
	end += fmt.Sprintf("\n<p><a href=\"%s\" id=\"bulk-back\">Back</a></p>", html.EscapeString(b.Back))
	_, _ = w.Write(visibleText([]byte(end)))
	_, _ = w.Write(tail)
}
