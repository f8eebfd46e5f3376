package dashboard_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"

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
