package dashboard

import (
	"context"
	"log/slog"
	"net/http"
)

// whoKey is the context key of the identity of a request.
type whoKey struct{}

// Identities of requests without a user name.
const (
	anonymous = "anonymous" // no Auth
	tokenUser = "token"     // the bearer token, in a header or a session
)

// withWho returns r carrying who as its identity.
func withWho(r *http.Request, who string) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), whoKey{}, who))
}

// who is the identity of r: the basic-auth user, "token", or "anonymous".
func who(r *http.Request) string {
	if w, ok := r.Context().Value(whoKey{}).(string); ok {
		return w
	}
	return anonymous
}

// auditEntry is one action for the audit log.
type auditEntry struct {
	action string // pause, resume, cancel, delete, run-now, requeue, purge, ...
	queue  string
	job    string // one job's ID, if the action had one
	count  int    // jobs the action touched (-1: not a count)
	filter string // the dead-letter filter of a bulk action
	detail string // what the action set (the flow limits)
	// workflow is the workflow's ID of an action on a workflow.
	workflow string
}

// logAction writes e, done by the client of r, to the audit log: at INFO
// when it succeeded, at WARN with the error when it failed.
func (s *server) logAction(r *http.Request, e auditEntry, err error) {
	attrs := []slog.Attr{
		slog.String("action", e.action), slog.String("user", who(r)), slog.String("client", r.RemoteAddr),
	}
	if e.queue != "" {
		attrs = append(attrs, slog.String("queue", e.queue))
	}
	if e.job != "" {
		attrs = append(attrs, slog.String("job", e.job))
	}
	if e.workflow != "" {
		attrs = append(attrs, slog.String("workflow", e.workflow))
	}
	if e.count >= 0 {
		attrs = append(attrs, slog.Int("count", e.count))
	}
	if e.filter != "" {
		attrs = append(attrs, slog.String("filter", e.filter))
	}
	if e.detail != "" {
		attrs = append(attrs, slog.String("detail", e.detail))
	}
	level := slog.LevelInfo
	if err != nil {
		level = slog.LevelWarn
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	s.audit.LogAttrs(r.Context(), level, "dashboard: audit", attrs...)
}
