package dashboard_test

import (
	"crypto/tls"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq/dashboard"
	"github.com/streamq/streamq/internal/redistest"
)

// Example mounts the dashboard under /admin/jobs of a service's own server,
// behind basic authentication.
func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Addr()})
	defer rdb.Close()
	password := "correct horse battery staple" // from your secret store

	// readme:dashboard:begin
	h, err := dashboard.New(rdb, &dashboard.Options{
		BasePath: "/admin/jobs", // where it is mounted
		Auth:     &dashboard.Auth{Username: "ops", Password: password},
		// ReadOnly: true hides and refuses every action;
		// Middleware plugs in your own authentication.
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/admin/jobs/", h)
	// readme:dashboard:end

	srv := httptest.NewServer(mux)
	defer srv.Close()
	res, err := http.Get(srv.URL + "/admin/jobs/")
	if err != nil {
		log.Fatal(err)
	}
	res.Body.Close()
	fmt.Println("without credentials:", res.StatusCode)

	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/admin/jobs/", nil)
	req.SetBasicAuth("ops", password)
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	res.Body.Close()
	fmt.Println("with credentials:", res.StatusCode, res.Header.Get("X-Frame-Options"))
	// Output:
	// without credentials: 401
	// with credentials: 200 DENY
}

// Example_tls serves the dashboard alone over HTTPS, reachable beyond
// loopback: with a token (browsers sign in once on a form and get a 12-hour
// session with a Secure cookie), its own host name, and an audit log of
// every action. (Compiled, not run: it needs a certificate.)
func Example_tls() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	h, err := dashboard.New(rdb, &dashboard.Options{
		Auth:         &dashboard.Auth{Token: os.Getenv("STREAMQ_DASHBOARD_TOKEN")}, // 16+ random characters
		AllowedHosts: []string{"jobs.example.com"},
		AuditLogger:  slog.New(slog.NewJSONHandler(os.Stderr, nil)),
	})
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{
		Addr:              ":8443",
		Handler:           h,
		TLSConfig:         &tls.Config{MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 10 * time.Second,
	}
	log.Fatal(srv.ListenAndServeTLS("/etc/streamq/tls.crt", "/etc/streamq/tls.key"))
}
