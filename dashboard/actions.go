package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/streamq/streamq/inspect"
)

const (
	// maxFormBytes bounds the body of an action.
	maxFormBytes = 64 << 10
	// bulkTimeout bounds one bulk requeue or purge.
	bulkTimeout = 2 * time.Minute
)

// done is what an action did: the message to show, the page to go back to
// ("" = the page the form came from) and, for the audit log, how many jobs
// it touched (-1: not a count).
type done struct {
	msg, next string
	count     int
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
		e := auditEntry{action: prefix + r.PathValue("action"), queue: r.PathValue("queue"), job: r.PathValue("id"), count: -1}
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
		ctx, cancel := context.WithTimeout(r.Context(), bulkTimeout)
		defer cancel()
		q, err := s.in.Queue(ctx, r.PathValue("queue"))
		if err != nil {
			s.fail(w, r, err)
			return
		}
		res, err := do(ctx, w, r, q)
		if res == nil && err == nil {
			return // the action wrote its own page (a confirmation)
		}
		if prefix == "dead-" {
			e.filter = filterText(r.PostForm)
		}
		if res != nil {
			e.count = res.count
		}
		s.logAction(r, e, err)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if res.next == "" {
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

// confirmData is the confirmation page of a bulk action.
type confirmData struct {
	Action, Queue string
	Count         int
	Partial       bool // Count is a lower bound: only Examined entries were examined
	Examined      int
	Filter        inspect.DeadFilter
	Fields        [][2]string // hidden fields to post again
	CancelURL     string
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
	if r.PostFormValue("confirm") != "yes" {
		ov, err := q.Overview(ctx)
		if err != nil {
			return nil, err
		}
		n, partial, err := countDead(ctx, q, ov, f)
		if err != nil {
			return nil, err
		}
		d := &confirmData{Action: a, Queue: q.Name(), Count: n, Partial: partial, Examined: inspect.DefaultScanLimit, Filter: f, CancelURL: deadPage}
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
	var n int
	if a == "requeue" {
		n, err = q.RequeueDead(ctx, f, nil)
	} else {
		n, err = q.PurgeDead(ctx, f, nil)
	}
	if err != nil {
		return &done{count: n}, err
	}
	verb := map[string]string{"requeue": "Requeued", "purge": "Purged"}[a]
	return &done{msg: fmt.Sprintf("%s %d dead letters of %s.", verb, n, q.Name()), next: deadPage, count: n}, nil
}
