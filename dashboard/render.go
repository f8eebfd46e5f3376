package dashboard

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/inspect"
	"github.com/streamq/streamq/internal/visible"
)

//go:embed templates/*.html static/*
var assets embed.FS

// pageNames are the templates, each parsed with layout.html.
var pageNames = []string{
	"overview", "queue", "job", "dead", "confirm", "consumers",
	"schedules", "priority", "writebehind", "login", "error",
	"progress", "history", "redis", "flow", "partitions", "outbox",
	"workflows", "workflow",
}

// progressMarker is where the page of a bulk action (progress.html) is cut
// to write its progress.
const progressMarker = `<span id="progress-marker" hidden></span>`

// view is what every page template receives.
type view struct {
	Title        string
	Base         string
	CSRF         string
	ReadOnly     bool
	HidePayloads bool
	SignedIn     bool // in a session started on the sign-in form: offer to sign out
	RefreshMS    int64
	LiveURL      string // "" = nothing refreshes on this page
	Flash        string
	Error        string
	Queue        *inspect.Overview // the queue of a queue page (sub-navigation)
	Outbox       bool              // Options.Outboxes is set: link the outbox page
	Tab          string
	Next         string // this page's path and query, where actions come back to
	Data         any
}

// bulkButton is a button of a bulk action on the queue page (template
// "bulkform").
type bulkButton struct {
	V                                   *view
	Action, State, Before, After, Class string
}

// parseTemplates parses every page with the layout and the helper functions
// of base (the BasePath links start with).
func parseTemplates(base string) (map[string]*template.Template, error) {
	funcs := template.FuncMap{
		"path":       func(parts ...string) string { return pathOf(base, parts...) },
		"ago":        ago,
		"dur":        fmtDuration,
		"payloadMax": func() int { return streamq.CompletedPayloadMax },
		"ts":         timestamp,
		"chart":      throughputChart,
		"history":    historyChart,
		"latency":    latencyChart,
		"bulk": func(v *view, action, state, before, after, class string) bulkButton {
			return bulkButton{V: v, Action: action, State: state, Before: before, After: after, Class: class}
		},
		"size":  sizeText,
		"bars":  levelBars,
		"trunc": truncate,
		"bytes": escapedBytes,
		"query": func(kv ...string) string {
			q := url.Values{}
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i+1] != "" {
					q.Set(kv[i], kv[i+1])
				}
			}
			if len(q) == 0 {
				return ""
			}
			return "?" + q.Encode()
		},
	}
	out := make(map[string]*template.Template, len(pageNames))
	for _, name := range pageNames {
		t, err := template.New(name).Funcs(funcs).ParseFS(assets, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, err
		}
		if t.Lookup("live") == nil {
			if _, err := t.New("live").Parse(""); err != nil {
				return nil, err
			}
		}
		out[name] = t
	}
	return out, nil
}

// pathOf joins base and the escaped path segments.
func pathOf(base string, parts ...string) string {
	var b strings.Builder
	b.WriteString(base)
	for _, p := range parts {
		b.WriteByte('/')
		b.WriteString(url.PathEscape(p))
	}
	if len(parts) == 0 {
		b.WriteByte('/')
	}
	return b.String()
}

// render executes page into a buffer (so an error never leaves half a page)
// and writes it with status. With ?partial=1 it writes only the live part.
func (s *server) render(w http.ResponseWriter, r *http.Request, status int, page string, v *view) {
	b, err := s.renderPage(w, r, page, v)
	if err != nil {
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// renderPage executes page with v (only its live part with ?partial=1) and
// returns it with every hidden character escaped (see visibleText). It may
// set cookies (CSRF, flash) on w, so it runs before the status is written;
// it logs an error.
func (s *server) renderPage(w http.ResponseWriter, r *http.Request, page string, v *view) ([]byte, error) {
	v.Base = s.opts.BasePath
	v.ReadOnly = s.opts.ReadOnly
	v.HidePayloads = s.opts.HidePayloads
	v.Outbox = len(s.opts.Outboxes) > 0
	if s.opts.Refresh > 0 {
		v.RefreshMS = s.opts.Refresh.Milliseconds()
	} else {
		v.LiveURL = ""
	}
	_, v.SignedIn = s.session(r)
	if !s.opts.ReadOnly || page == "login" || v.SignedIn {
		v.CSRF = s.csrfToken(w, r)
	}
	if v.Flash == "" {
		v.Flash = s.takeFlash(w, r)
	}
	tmpl := "layout"
	if r.URL.Query().Get("partial") == "1" {
		tmpl = "live"
	}
	var buf bytes.Buffer
	if err := s.pages[page].ExecuteTemplate(&buf, tmpl, v); err != nil {
		s.log.ErrorContext(r.Context(), "dashboard: render", "page", page, "error", err)
		return nil, err
	}
	return visibleText(buf.Bytes()), nil
}

// visibleText writes every character of page that would not show as itself
// (a right-to-left override in a payload, a zero-width space in a queue
// name, a control character in an error: see visible.Hidden) as an escape
// like \u202e, in text and in attribute values (a confirmation dialog shows
// one), but not in the value attributes of form fields, which must post
// back what they hold. The templates' escaping leaves no "<", ">" or quote
// in data, so every "<" opens a tag, the next ">" closes it, and quotes in
// a tag delimit attribute values.
func visibleText(page []byte) []byte {
	var out []byte // nil until a change is needed
	inTag, quote, keep := false, byte(0), false
	for i := 0; i < len(page); {
		c := page[i]
		switch {
		case quote != 0 && c == quote:
			quote, keep = 0, false
		case quote == 0 && inTag && (c == '"' || c == '\''):
			quote = c
			keep = attrName(page[:i]) == "value"
		case quote == 0 && c == '<':
			inTag = true
		case quote == 0 && c == '>':
			inTag = false
		case !keep && (c >= utf8.RuneSelf || (c < 0x20 && c != '\n' && c != '\t' && c != '\r') || c == 0x7f):
			r, size := utf8.DecodeRune(page[i:])
			if (r == utf8.RuneError && size == 1) || (visible.Hidden(r) && r != '\n' && r != '\t' && r != '\r') {
				if out == nil {
					out = append(make([]byte, 0, len(page)+64), page[:i]...)
				}
				out = append(out, visible.Escape(string(page[i:i+size]), true)...)
			} else if out != nil {
				out = append(out, page[i:i+size]...)
			}
			i += size
			continue
		}
		if out != nil {
			out = append(out, c)
		}
		i++
	}
	if out == nil {
		return page
	}
	return out
}

// attrName returns the name of the attribute whose value starts after
// before (which ends with `name=`), lower-cased.
func attrName(before []byte) string {
	end := len(before)
	if end == 0 || before[end-1] != '=' {
		return ""
	}
	start := end - 1
	for start > 0 && (before[start-1] == '-' || before[start-1] >= 'a' && before[start-1] <= 'z' || before[start-1] >= 'A' && before[start-1] <= 'Z') {
		start--
	}
	return strings.ToLower(string(before[start : end-1]))
}

// setFlash keeps msg for the next page this browser loads.
func (s *server) setFlash(w http.ResponseWriter, r *http.Request, msg string) {
	http.SetCookie(w, &http.Cookie{
		Name: flashCookie, Value: url.QueryEscape(msg), Path: s.cookiePath(),
		MaxAge: 60, HttpOnly: true, Secure: s.secure(r), SameSite: http.SameSiteStrictMode,
	})
}

// takeFlash returns and clears the message of the last action.
func (s *server) takeFlash(w http.ResponseWriter, r *http.Request) string {
	if r.URL.Query().Get("partial") == "1" {
		return ""
	}
	c, err := r.Cookie(flashCookie)
	if err != nil {
		return ""
	}
	http.SetCookie(w, &http.Cookie{Name: flashCookie, Path: s.cookiePath(), MaxAge: -1, HttpOnly: true, Secure: s.secure(r), SameSite: http.SameSiteStrictMode})
	msg, err := url.QueryUnescape(c.Value)
	if err != nil {
		return ""
	}
	return truncate(msg, 300)
}

// serveStatic serves the embedded script and style sheet.
func (s *server) serveStatic(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("file")
	b, err := fs.ReadFile(assets, "static/"+name)
	if err != nil || strings.Contains(name, "/") {
		http.NotFound(w, r)
		return
	}
	switch {
	case strings.HasSuffix(name, ".js"):
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
	case strings.HasSuffix(name, ".css"):
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
	}
	w.Header().Set("Cache-Control", "private, max-age=300")
	_, _ = w.Write(b)
}

// ago says how long before now t was ("-" for the zero time).
func ago(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := time.Since(t)
	if d < 0 {
		return "in " + fmtDuration(-d)
	}
	return fmtDuration(d) + " ago"
}

// fmtDuration writes d rounded to what a reader needs.
func fmtDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < 24*time.Hour:
		return d.Round(time.Second).String()
	default:
		days := int64(d / (24 * time.Hour))
		return strconv.FormatInt(days, 10) + "d" + (d % (24 * time.Hour)).Round(time.Minute).String()
	}
}

// timestamp writes t in UTC ("-" for the zero time).
func timestamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000 UTC")
}

// truncate cuts s to at most n bytes on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// escapedBytes shows b as text when it is printable UTF-8, else as a Go
// quoted string, cut to n bytes.
func escapedBytes(b []byte, n int) string {
	if len(b) > n {
		b = b[:n]
	}
	if utf8.Valid(b) && printable(string(b)) {
		return truncate(string(b), n)
	}
	return strconv.Quote(string(b))
}

// printable reports whether s has only printable runes and white space.
func printable(s string) bool {
	for _, r := range s {
		if r == utf8.RuneError || (r < 0x20 && r != '\n' && r != '\t' && r != '\r') || r == 0x7f {
			return false
		}
	}
	return true
}

// pretty returns payload as indented JSON when it is JSON, as text when it is
// printable UTF-8, and otherwise as escaped bytes; kind says which.
func pretty(payload []byte) (text, kind string) {
	const maxShown = 256 << 10
	if len(payload) == 0 {
		return "", "empty"
	}
	if len(payload) <= maxShown && json.Valid(payload) {
		var buf bytes.Buffer
		if json.Indent(&buf, payload, "", "  ") == nil {
			return buf.String(), "JSON"
		}
	}
	cut := ""
	if len(payload) > maxShown {
		payload = payload[:maxShown]
		cut = fmt.Sprintf(" (first %d bytes)", maxShown)
	}
	if utf8.Valid(payload) && printable(string(payload)) {
		return string(payload), "text" + cut
	}
	return strconv.Quote(string(payload)), "escaped bytes" + cut
}

// throughputChart draws processed and failed jobs per minute as an inline
// SVG line chart.
func throughputChart(points []inspect.Point, width, height int) template.HTML {
	return lineChart(points, time.Minute, width, height)
}

// historyChart draws a History, per minute or per hour.
func historyChart(h *inspect.History, width, height int) template.HTML {
	return lineChart(h.Points, h.Step, width, height)
}

// latencyLines are the lines of latencyChart: a field of Point, its class
// and its stroke (SVG attributes, not inline CSS, for the pages' CSP).
var latencyLines = []struct {
	name, stroke, dash string
	v                  func(inspect.Point) time.Duration
}{
	{"wait p50", "#2f80ed", "", func(p inspect.Point) time.Duration { return p.WaitP50 }},
	{"wait p95", "#2f80ed", "4 3", func(p inspect.Point) time.Duration { return p.WaitP95 }},
	{"run p50", "#e67e22", "", func(p inspect.Point) time.Duration { return p.RunP50 }},
	{"run p95", "#e67e22", "4 3", func(p inspect.Point) time.Duration { return p.RunP95 }},
}

// latencyChart draws the wait and run time percentiles of points (steps
// where no job ran are left out of the lines) as an inline SVG line chart
// on a linear scale up to the largest. Numbers and fixed text only.
func latencyChart(points []inspect.Point, step time.Duration, width, height int) template.HTML {
	const pad = 22
	span := "m"
	if step == time.Hour {
		span = "h"
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="wait and run time percentiles">`, width, height, width, height)
	maxV := time.Millisecond
	for _, p := range points {
		maxV = max(maxV, p.WaitP95, p.RunP95, p.WaitP50, p.RunP50)
	}
	fmt.Fprintf(&b, `<title>last %d%s: wait and run time p50 and p95, up to %s</title>`, len(points), span, maxV.Round(time.Millisecond))
	plotW, plotH := float64(width-2*pad), float64(height-2*pad)
	fmt.Fprintf(&b, `<line class="axis" x1="%d" y1="%d" x2="%d" y2="%d"/>`, pad, height-pad, width-pad, height-pad)
	fmt.Fprintf(&b, `<text class="label" x="%d" y="%d">%s</text>`, pad, pad-8, maxV.Round(time.Millisecond))
	n := len(points)
	if n > 0 {
		fmt.Fprintf(&b, `<text class="label" x="%d" y="%d">-%d%s</text>`, pad, height-6, n, span)
		fmt.Fprintf(&b, `<text class="label" x="%d" y="%d" text-anchor="end">now</text>`, width-pad, height-6)
	}
	for _, l := range latencyLines {
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" stroke-dasharray="%s" points="`, l.stroke, l.dash)
		for i, p := range points {
			if p.RunP50 == 0 && p.WaitP50 == 0 {
				continue // no job ran
			}
			x := float64(pad)
			if n > 1 {
				x += plotW * float64(i) / float64(n-1)
			}
			y := float64(height-pad) - plotH*float64(l.v(p))/float64(maxV)
			fmt.Fprintf(&b, "%.1f,%.1f ", x, y)
		}
		fmt.Fprintf(&b, `"><title>%s</title></polyline>`, l.name)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) //nolint:gosec // numbers and fixed text only
}

// lineChart draws processed and failed jobs per step (a minute or an hour)
// as an inline SVG line chart that scales down to the width of its box. It
// writes only numbers and fixed text, so it is safe HTML.
func lineChart(points []inspect.Point, step time.Duration, width, height int) template.HTML {
	const pad = 22
	unit, span := "min", "m"
	if step == time.Hour {
		unit, span = "h", "h"
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="processed and failed per %s">`, width, height, width, height, unit)
	var maxV int64 = 1
	var sumP, sumF int64
	for _, p := range points {
		maxV = max(maxV, p.Processed, p.Failed)
		sumP += p.Processed
		sumF += p.Failed
	}
	fmt.Fprintf(&b, `<title>last %d%s: %d processed, %d failed</title>`, len(points), span, sumP, sumF)
	plotW, plotH := float64(width-2*pad), float64(height-2*pad)
	fmt.Fprintf(&b, `<line class="axis" x1="%d" y1="%d" x2="%d" y2="%d"/>`, pad, height-pad, width-pad, height-pad)
	fmt.Fprintf(&b, `<text class="label" x="%d" y="%d">%d/%s</text>`, pad, pad-8, maxV, unit)
	if n := len(points); n > 0 {
		fmt.Fprintf(&b, `<text class="label" x="%d" y="%d">-%d%s</text>`, pad, height-6, n, span)
		fmt.Fprintf(&b, `<text class="label" x="%d" y="%d" text-anchor="end">now</text>`, width-pad, height-6)
		line := func(class string, v func(inspect.Point) int64) {
			fmt.Fprintf(&b, `<polyline class="%s" points="`, class)
			for i, p := range points {
				x := float64(pad)
				if n > 1 {
					x += plotW * float64(i) / float64(n-1)
				}
				y := float64(height-pad) - plotH*float64(v(p))/float64(maxV)
				fmt.Fprintf(&b, "%.1f,%.1f ", x, y)
			}
			b.WriteString(`"/>`)
		}
		line("processed", func(p inspect.Point) int64 { return p.Processed })
		line("failed", func(p inspect.Point) int64 { return p.Failed })
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) //nolint:gosec // numbers and fixed text only
}

// sizeText writes n bytes in binary units: "1.5 MiB".
func sizeText(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}

// levelBars draws the jobs of each priority band as horizontal SVG bars.
func levelBars(levels []inspect.Level) template.HTML {
	const width, rowH, labelW = 520, 22, 110
	var maxC int64 = 1
	for _, l := range levels {
		maxC = max(maxC, l.Count)
	}
	h := rowH*len(levels) + 4
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="bars" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="jobs per priority">`, width, h, width, h)
	for i, l := range levels {
		y := i*rowH + 2
		w := math.Max(1, float64(width-labelW-70)*float64(l.Count)/float64(maxC))
		fmt.Fprintf(&b, `<text class="label" x="0" y="%d">priority %d</text>`, y+15, l.Priority)
		fmt.Fprintf(&b, `<rect class="bar" x="%d" y="%d" width="%.1f" height="%d"/>`, labelW, y, w, rowH-6)
		fmt.Fprintf(&b, `<text class="label" x="%.1f" y="%d">%d</text>`, float64(labelW)+w+6, y+15, l.Count)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) //nolint:gosec // numbers and fixed text only
}
