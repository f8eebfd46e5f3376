package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/middleware"
)

// otelScopeLabels matches the instrumentation-scope labels the exporter adds
// to every series; the summary leaves them out to stay readable.
var otelScopeLabels = regexp.MustCompile(`,?otel_scope_[a-z_]+="[^"]*"`)

// demoMetrics serves the consumer's OpenTelemetry metrics on a Prometheus
// /metrics endpoint through the OTel Prometheus exporter.
type demoMetrics struct {
	metrics *middleware.Metrics
	mp      *sdkmetric.MeterProvider
	srv     *http.Server
	url     string
	served  chan error
}

// startMetrics listens on addr and serves /metrics for the queues qs.
func startMetrics(addr string, qs ...*streamq.Queue) (*demoMetrics, error) {
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	m, err := middleware.NewMetrics(&middleware.MetricsConfig{MeterProvider: mp, Queues: qs})
	if err != nil {
		_ = mp.Shutdown(context.Background())
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		_ = m.Close()
		_ = mp.Shutdown(context.Background())
		return nil, fmt.Errorf("metrics endpoint: %w (choose another address with -metrics, or -metrics '' to turn it off)", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	d := &demoMetrics{
		metrics: m,
		mp:      mp,
		srv:     &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second},
		url:     "http://" + ln.Addr().String() + "/metrics",
		served:  make(chan error, 1),
	}
	go func() { d.served <- d.srv.Serve(ln) }()
	return d, nil
}

// printSummary scrapes the endpoint like Prometheus would and prints the job
// counters and queue gauges.
func (d *demoMetrics) printSummary(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("scrape %s: %w", d.url, err)
	}
	defer resp.Body.Close()
	fmt.Printf("metrics scraped from %s:\n", d.url)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		name, _, _ := strings.Cut(line, "{")
		if strings.HasPrefix(name, "streamq_jobs_") || strings.HasPrefix(name, "streamq_queue_") {
			fmt.Println("  " + otelScopeLabels.ReplaceAllString(line, ""))
		}
	}
	return sc.Err()
}

// close stops the endpoint and the meter provider.
func (d *demoMetrics) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = d.srv.Shutdown(ctx)
	if err := <-d.served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Println("metrics endpoint:", err)
	}
	_ = d.metrics.Close()
	_ = d.mp.Shutdown(ctx)
}
