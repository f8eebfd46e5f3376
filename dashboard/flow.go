package dashboard

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sync/errgroup"

	"github.com/streamq/streamq/inspect"
	"github.com/streamq/streamq/internal/visible"
)

// maxFlowRows bounds the flow keys the flow page lists: the keys with the
// most running jobs, then the most waiting ones.
const maxFlowRows = 50

// waitTexts say in words what each reason of inspect.WaitReasons holds
// jobs for, as the flow page's summary shows them.
var waitTexts = map[string]string{
	inspect.WaitPaused:       "the queue is paused",
	inspect.WaitDelayed:      "scheduled for later",
	inspect.WaitRetryBackoff: "failed, waiting for their retry",
	inspect.WaitRateLimited:  "their flow key is over its rate limit",
	inspect.WaitKeyCap:       "their flow key is at its cap",
	inspect.WaitKindCap:      "their kind is at its cap",
	inspect.WaitGlobalCap:    "waiting aside for the global cap or their turn",
	inspect.WaitBehind:       "behind other jobs, for a free consumer",
	inspect.WaitNoConsumer:   "no consumer read the queue in the last minute",
}

// flowData is the flow-control page of a queue.
type flowData struct {
	State *inspect.FlowState
	// Keys are the flow keys with the most running jobs, then the most
	// waiting ones (at most maxFlowRows); MoreKeys counts the others.
	Keys     []flowKeyRow
	MoreKeys int
	Kinds    []flowKindRow
	Why      []whyRow
	Form     flowForm // the limits as the form shows them
}

// flowKeyRow is one flow key of the flow page.
type flowKeyRow struct {
	Key              string
	Running, Waiting int64
	Cap, Rate        string
	Weight           int
}

// flowKindRow is one kind of the flow page.
type flowKindRow struct {
	Kind        string
	Running     int64
	Cap, PerKey string
}

// whyRow is one reason of the wait summary.
type whyRow struct {
	Reason, Text string
	Jobs         int64
}

// flowForm is the text of the limits form: numbers, and one
// "<name>=<value>" per line for the maps.
type flowForm struct {
	Global, PerKey, Rate                     string
	Keys, Rates, Weights, Kinds, KindsPerKey string
	// Raw are the flow keys and kinds that the lines show escaped (they
	// hold characters that would not show as themselves: see
	// visible.Escape), each base64url-encoded, so that a save gives them
	// back exactly (see rawNames).
	Raw []string
}

func (s *server) flow(w http.ResponseWriter, r *http.Request) {
	s.queueTab(w, r, "flow", "flow control", true, func(ctx context.Context, q *inspect.Queue, _ *inspect.Overview) (any, error) {
		d := &flowData{}
		var sum map[string]int64
		g, gctx := errgroup.WithContext(ctx)
		g.Go(func() (err error) {
			d.State, err = q.Flow(gctx)
			return err
		})
		g.Go(func() (err error) {
			sum, err = q.WaitSummary(gctx)
			return err
		})
		if err := g.Wait(); err != nil {
			return nil, err
		}
		for _, reason := range inspect.WaitReasons() {
			if n := sum[reason]; n > 0 {
				d.Why = append(d.Why, whyRow{Reason: reason, Text: waitTexts[reason], Jobs: n})
			}
		}
		d.Keys, d.MoreKeys = flowKeyRows(d.State)
		d.Kinds = flowKindRows(d.State)
		d.Form = formOf(d.State.Limits)
		return d, nil
	})
}

// flowKeyRows lists the flow keys of st that run or wait jobs or have
// limits of their own, most running first, then most waiting, then by
// name; at most maxFlowRows, with the number left out.
func flowKeyRows(st *inspect.FlowState) ([]flowKeyRow, int) {
	l := st.Limits
	keys := map[string]bool{}
	for _, m := range []map[string]int64{st.PerKey, st.Waiting} {
		for k := range m {
			keys[k] = true
		}
	}
	for _, m := range []map[string]int{l.Keys, l.Weights} {
		for k := range m {
			keys[k] = true
		}
	}
	for k := range l.Rates {
		keys[k] = true
	}
	rows := make([]flowKeyRow, 0, len(keys))
	for k := range keys {
		row := flowKeyRow{Key: k, Running: st.PerKey[k], Waiting: st.Waiting[k], Cap: "none", Rate: "none", Weight: 1}
		if k != "" { // jobs without a flow key have no cap, rate or weight of their own
			row.Cap = capText(cmp.Or(l.Keys[k], l.PerKey))
			row.Rate = rateText(cmp.Or(l.Rates[k], l.Rate))
			row.Weight = cmp.Or(l.Weights[k], 1)
		}
		rows = append(rows, row)
	}
	slices.SortFunc(rows, func(a, b flowKeyRow) int {
		return cmp.Or(cmp.Compare(b.Running, a.Running), cmp.Compare(b.Waiting, a.Waiting), strings.Compare(a.Key, b.Key))
	})
	if len(rows) > maxFlowRows {
		return rows[:maxFlowRows], len(rows) - maxFlowRows
	}
	return rows, 0
}

// flowKindRows lists the kinds of st that run jobs or have caps, by name.
func flowKindRows(st *inspect.FlowState) []flowKindRow {
	kinds := slices.Collect(maps.Keys(st.PerKind))
	for _, m := range []map[string]int{st.Limits.Kinds, st.Limits.KindPerKey} {
		for k := range m {
			if !slices.Contains(kinds, k) {
				kinds = append(kinds, k)
			}
		}
	}
	slices.Sort(kinds)
	rows := make([]flowKindRow, len(kinds))
	for i, k := range kinds {
		rows[i] = flowKindRow{Kind: k, Running: st.PerKind[k], Cap: capText(st.Limits.Kinds[k]), PerKey: capText(st.Limits.KindPerKey[k])}
	}
	return rows
}

// capText writes a cap ("none" for 0).
func capText(n int) string {
	if n <= 0 {
		return "none"
	}
	return strconv.Itoa(n)
}

// rateText writes a rate in jobs per second ("none" for 0).
func rateText(r float64) string {
	if r <= 0 {
		return "none"
	}
	return strconv.FormatFloat(r, 'g', -1, 64) + "/s"
}

// formOf writes limits l as the form shows them.
func formOf(l inspect.FlowLimits) flowForm {
	num := func(n int) string {
		if n == 0 {
			return ""
		}
		return strconv.Itoa(n)
	}
	var f flowForm
	f.Global, f.PerKey = num(l.Global), num(l.PerKey)
	f.Keys, f.Weights = linesOf(l.Keys, &f.Raw), linesOf(l.Weights, &f.Raw)
	f.Kinds, f.KindsPerKey = linesOf(l.Kinds, &f.Raw), linesOf(l.KindPerKey, &f.Raw)
	if l.Rate > 0 {
		f.Rate = strconv.FormatFloat(l.Rate, 'g', -1, 64)
	}
	rates := make(map[string]string, len(l.Rates))
	for k, r := range l.Rates {
		rates[k] = strconv.FormatFloat(r, 'g', -1, 64)
	}
	f.Rates = linesOf(rates, &f.Raw)
	slices.Sort(f.Raw)
	f.Raw = slices.Compact(f.Raw)
	return f
}

// linesOf writes m as "<name>=<value>" lines sorted by name, a name that
// would not show as itself escaped (one line, see visible.Escape), its raw
// bytes appended to raw (base64url).
func linesOf[V any](m map[string]V, raw *[]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(m)) {
		shown := visible.Escape(k, false)
		if shown != k {
			*raw = append(*raw, base64.RawURLEncoding.EncodeToString([]byte(k)))
		}
		fmt.Fprintf(&b, "%s=%v\n", shown, m[k])
	}
	return b.String()
}

// rawNames reads the raw_key fields of the limits form (see flowForm.Raw):
// the escaped form of each name -> the name.
func rawNames(form url.Values) (map[string]string, error) {
	out := make(map[string]string, len(form["raw_key"]))
	for _, v := range form["raw_key"] {
		b, err := base64.RawURLEncoding.DecodeString(v)
		if err != nil {
			return nil, badRequest(fmt.Sprintf("raw_key %q is not base64url: reload the flow page and save again", v))
		}
		out[visible.Escape(string(b), false)] = string(b)
	}
	return out, nil
}

// withRaw returns m with each name that is the escaped form of a raw name
// (see rawNames) replaced by that name.
func withRaw[V any](m map[string]V, raw map[string]string) map[string]V {
	for shown, name := range raw {
		if v, ok := m[shown]; ok && shown != name {
			delete(m, shown)
			m[name] = v
		}
	}
	return m
}

// setFlow replaces the queue's flow limits with those of the form, which
// names them as the CLI's `streamq flow set` flags do.
func (s *server) setFlow(ctx context.Context, _ http.ResponseWriter, r *http.Request, q *inspect.Queue) (*done, error) {
	l, err := parseLimits(r.PostForm)
	if err != nil {
		return nil, err
	}
	if err := q.SetFlowLimits(ctx, l); err != nil {
		if errors.Is(err, inspect.ErrInvalidFlowLimits) {
			return nil, badRequest(err.Error())
		}
		return nil, err
	}
	text := limitsText(l)
	return &done{msg: "Set the flow limits of " + q.Name() + ": " + text + ". Consumers apply them to the next jobs they start.",
		next: pathOf(s.opts.BasePath, "queues", q.Name(), "flow"), count: -1, detail: text}, nil
}

// limitsText sums limits up for the flash message and the audit log.
func limitsText(l inspect.FlowLimits) string {
	parts := []string{"global cap " + capText(l.Global), "per-key cap " + capText(l.PerKey), "per-key rate " + rateText(l.Rate)}
	for _, m := range []struct {
		name string
		n    int
	}{{"key caps", len(l.Keys)}, {"key rates", len(l.Rates)}, {"weights", len(l.Weights)}, {"kind caps", len(l.Kinds)}, {"kind caps per key", len(l.KindPerKey)}} {
		if m.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", m.n, m.name))
		}
	}
	return strings.Join(parts, ", ")
}

// parseLimits reads the limits form; an error says which field is wrong
// and how to write it.
func parseLimits(form url.Values) (inspect.FlowLimits, error) {
	var l inspect.FlowLimits
	var err error
	if l.Global, err = capField(form, "global", "global cap"); err != nil {
		return l, err
	}
	if l.PerKey, err = capField(form, "per_key", "per-key cap"); err != nil {
		return l, err
	}
	if v := strings.TrimSpace(form.Get("rate")); v != "" {
		if l.Rate, err = strconv.ParseFloat(v, 64); err != nil || l.Rate < 0 || !finite(l.Rate) {
			return l, badRequest(fmt.Sprintf("per-key rate %q: use jobs per second, like 10 or 0.5 (empty or 0: no limit)", v))
		}
	}
	intLine := func(v string) (int, bool) {
		n, err := strconv.Atoi(v)
		return n, err == nil && n >= 1
	}
	if l.Keys, err = pairs(form.Get("keys"), "key caps", "<flow key>=<cap>, a cap of 1 or more", intLine); err != nil {
		return l, err
	}
	if l.Rates, err = pairs(form.Get("key_rates"), "key rates", "<flow key>=<jobs per second>, above 0", func(v string) (float64, bool) {
		r, err := strconv.ParseFloat(v, 64)
		return r, err == nil && r > 0 && finite(r)
	}); err != nil {
		return l, err
	}
	if l.Weights, err = pairs(form.Get("weights"), "weights", "<flow key>=<weight>, a weight of 1 or more", intLine); err != nil {
		return l, err
	}
	if l.Kinds, err = pairs(form.Get("kinds"), "kind caps", "<kind>=<cap>, a cap of 1 or more", intLine); err != nil {
		return l, err
	}
	if l.KindPerKey, err = pairs(form.Get("kind_per_key"), "kind caps per key", "<kind>=<cap per flow key>, a cap of 1 or more", intLine); err != nil {
		return l, err
	}
	raw, err := rawNames(form)
	if err != nil {
		return l, err
	}
	for _, m := range []map[string]int{l.Keys, l.Weights, l.Kinds, l.KindPerKey} {
		withRaw(m, raw)
	}
	withRaw(l.Rates, raw)
	for _, m := range []map[string]int{l.Kinds, l.KindPerKey} {
		for k := range m {
			if strings.ContainsAny(k, " \t\x00") {
				return l, badRequest(fmt.Sprintf("kind %q holds white space: a kind is one word, like email.send", k))
			}
		}
	}
	return l, nil
}

// finite reports whether f is neither infinite nor NaN.
func finite(f float64) bool { return f-f == 0 }

// capField reads a cap: empty or 0 for none, else a positive number.
func capField(form url.Values, field, what string) (int, error) {
	v := strings.TrimSpace(form.Get(field))
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, badRequest(fmt.Sprintf("%s %q: use a whole number of jobs (empty or 0: no cap)", what, v))
	}
	return n, nil
}

// pairs reads one "<name>=<value>" per line (blank lines skipped; the name
// is what comes before the last "=", trimmed of surrounding spaces).
func pairs[V any](text, what, form string, parse func(string) (V, bool)) (map[string]V, error) {
	var m map[string]V
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		eq := strings.LastIndex(line, "=")
		if eq < 0 {
			return nil, badRequest(fmt.Sprintf("%s, line %d %q: write %s", what, i+1, line, form))
		}
		name, val := strings.TrimSpace(line[:eq]), strings.TrimSpace(line[eq+1:])
		v, ok := parse(val)
		if name == "" || !ok {
			return nil, badRequest(fmt.Sprintf("%s, line %d %q: write %s", what, i+1, line, form))
		}
		if _, dup := m[name]; dup {
			return nil, badRequest(fmt.Sprintf("%s, line %d: %q is given twice: keep one line for it", what, i+1, name))
		}
		if m == nil {
			m = map[string]V{}
		}
		m[name] = v
	}
	return m, nil
}

// explain returns why job j has not started (nil for a job that runs or
// ended). With HidePayloads the retry's reason leaves out the error the
// attempt failed with, which often quotes the payload.
func (s *server) explain(ctx context.Context, q *inspect.Queue, j *inspect.Job) ([]inspect.WaitReason, error) {
	switch j.State {
	case inspect.StateWaiting, inspect.StateDelayed, inspect.StateRetrying:
	default:
		return nil, nil
	}
	why, err := q.Explain(ctx, j.ID)
	if errors.Is(err, inspect.ErrJobNotFound) {
		return nil, nil // it ended since it was read: the page shows its state
	}
	if err != nil {
		return nil, err
	}
	for i, r := range why.Reasons {
		if r.Reason == inspect.WaitRetryBackoff && s.opts.HidePayloads {
			why.Reasons[i].Detail = fmt.Sprintf("attempt %d failed; the retry is due at %s", j.Attempt, timestamp(r.Until))
		}
	}
	return why.Reasons, nil
}
