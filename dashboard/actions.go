package dashboard

import (
	"context"
	"fmt"
	"net/http"
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

// actionFunc does one action and returns the message to show and the page to
// go back to ("" = the page the form came from).
type actionFunc func(ctx context.Context, w http.ResponseWriter, r *http.Request, q *inspect.Queue) (msg, next string, err error)

// action wraps an action: it is refused in read-only mode and without a
// valid same-origin CSRF token, and redirects back with a message.
func (s *server) action(do actionFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.opts.ReadOnly {
			s.render(w, r, http.StatusForbidden, "error", &view{Title: "Forbidden", Error: "this dashboard is read-only"})
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
		if err := r.ParseForm(); err != nil {
			s.fail(w, r, badRequest("bad form: "+err.Error()))
			return
		}
		if why := s.checkCSRF(r); why != "" {
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
		msg, next, err := do(ctx, w, r, q)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if msg == "" && next == "" {
			return // the action wrote its own page (a confirmation)
		}
		if next == "" {
			next = s.back(r, q.Name())
		}
		s.setFlash(w, msg)
		http.Redirect(w, r, next, http.StatusSeeOther)
	}
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
func (s *server) queueAction(ctx context.Context, _ http.ResponseWriter, r *http.Request, q *inspect.Queue) (string, string, error) {
	switch r.PathValue("action") {
	case "pause":
		if err := q.Pause(ctx); err != nil {
			return "", "", err
		}
		return "Paused queue " + q.Name() + ": consumers finish their running jobs and take no new ones.", "", nil
	case "resume":
		if err := q.Resume(ctx); err != nil {
			return "", "", err
		}
		return "Resumed queue " + q.Name() + ".", "", nil
	}
	return "", "", badRequest("unknown action " + r.PathValue("action"))
}

// jobAction cancels, deletes, runs now or requeues one job.
func (s *server) jobAction(ctx context.Context, _ http.ResponseWriter, r *http.Request, q *inspect.Queue) (string, string, error) {
	id := r.PathValue("id")
	switch a := r.PathValue("action"); a {
	case "cancel":
		if err := q.Cancel(ctx, id); err != nil {
			return "", "", err
		}
		return "Cancel requested for job " + id + ": its handler's context is cancelled within a control interval.", "", nil
	case "delete":
		if err := q.Delete(ctx, id); err != nil {
			return "", "", err
		}
		return "Deleted job " + id + ".", pathOf(s.opts.BasePath, "queues", q.Name()), nil
	case "run":
		if err := q.RunNow(ctx, id); err != nil {
			return "", "", err
		}
		return "Job " + id + " runs now.", "", nil
	case "requeue":
		n, err := q.RequeueDead(ctx, inspect.DeadFilter{IDs: []string{id}}, nil)
		if err != nil {
			return "", "", err
		}
		if n == 0 {
			return "Job " + id + " was not requeued: it is no longer a dead letter.", "", nil
		}
		return "Requeued job " + id + ".", "", nil
	default:
		return "", "", badRequest("unknown action " + a)
	}
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
func (s *server) bulkAction(ctx context.Context, w http.ResponseWriter, r *http.Request, q *inspect.Queue) (string, string, error) {
	a := r.PathValue("action")
	if a != "requeue" && a != "purge" {
		return "", "", badRequest("unknown action " + a)
	}
	f, err := deadFilter(r.PostForm)
	if err != nil {
		return "", "", err
	}
	deadPage := pathOf(s.opts.BasePath, "queues", q.Name(), "dead")
	if r.PostFormValue("confirm") != "yes" {
		ov, err := q.Overview(ctx)
		if err != nil {
			return "", "", err
		}
		n, partial, err := countDead(ctx, q, ov, f)
		if err != nil {
			return "", "", err
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
		return "", "", nil
	}
	var n int
	if a == "requeue" {
		n, err = q.RequeueDead(ctx, f, nil)
	} else {
		n, err = q.PurgeDead(ctx, f, nil)
	}
	if err != nil {
		return "", "", err
	}
	verb := map[string]string{"requeue": "Requeued", "purge": "Purged"}[a]
	return fmt.Sprintf("%s %d dead letters of %s.", verb, n, q.Name()), deadPage, nil
}
