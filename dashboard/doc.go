// Package dashboard is a web dashboard for streamq queues: an http.Handler to
// mount in your own server, or to run alone with `streamq dashboard`.
//
// It shows every queue registered under a key prefix (depth, waiting,
// running, delayed, retrying, dead and cancelled jobs, the age of the oldest
// waiting job, processed and failed jobs per minute as server-rendered SVG
// charts, a paused badge), the jobs of a queue by state with paging and a
// search by ID, header and payload substring, one job (payload as indented
// JSON or escaped bytes, headers, each failed attempt with its error,
// progress, result, timings, trace ID), dead letters with filters by reason,
// error and time and bulk requeue and purge behind a confirmation that shows
// the count, consumers and workers, periodic schedules, priority bands and
// write-behind status. Actions (pause, resume, cancel, delete, run now,
// requeue, purge) are hidden and refused with Options.ReadOnly.
//
// Everything it reads and does goes through package inspect, whose queries
// are bounded, so every page answers quickly however long the queues are.
//
// # Security
//
//   - Authentication: Options.Auth (basic or bearer token), and
//     Options.Middleware to plug your own.
//   - Every action is a POST that must come from the same origin (Origin or
//     Referer, Sec-Fetch-Site) and carry a CSRF token: the HMAC, under a key
//     drawn at New, of a random value kept in a SameSite=Strict HttpOnly
//     cookie.
//   - Headers: a Content-Security-Policy allowing only the dashboard's own
//     script and style sheet (no inline script, no other origin, no framing),
//     X-Content-Type-Options nosniff, X-Frame-Options DENY,
//     Referrer-Policy no-referrer, Cache-Control no-store.
//   - Options.HidePayloads keeps payloads and results off every page.
//
// Templates, the style sheet and the small script (live refresh of each
// page's live part by fetching it again, every Options.Refresh) are embedded
// with go:embed: nothing is loaded from elsewhere and nothing needs a build
// step.
package dashboard
