package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Names of the outbox's metrics, gauges per queue (attribute
// "messaging.destination.name") and outbox table (attribute
// "streamq.outbox.table").
const (
	// MetricRows is a gauge, rows: the rows waiting in the outbox table.
	MetricRows = "streamq.outbox.rows"
	// MetricOldest is a gauge, seconds: the age of the oldest row waiting
	// (by the database's clock); 0 when none waits.
	MetricOldest = "streamq.outbox.oldest_waiting"
	// MetricLag is a gauge, seconds: how long the oldest row that is due
	// and has not failed has been due (see [Backlog.Lag]); 0 when none.
	MetricLag = "streamq.outbox.lag"
	// MetricFailing is a gauge, rows: the rows the relay failed to enqueue
	// at least once (see [QueueBacklog.LastError]).
	MetricFailing = "streamq.outbox.failing"
)

// scopeName is the instrumentation scope of the outbox's metrics.
const scopeName = "github.com/streamq/streamq/outbox"

// metricsTimeout bounds the backlog query of one collection.
const metricsTimeout = 10 * time.Second

// MetricsConfig configures [RegisterMetrics]. The zero value is valid.
type MetricsConfig struct {
	// MeterProvider creates the gauges. Defaults to otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// Table names the table in the streamq.outbox.table attribute.
	// Defaults to DefaultTable.
	Table string
}

// RegisterMetrics reports the backlog of store (see [Store.Backlog]) as
// observable gauges, read from the database at every collection: rows
// waiting, the oldest row's age, the relays' lag and the failing rows, per
// queue. Register
// them in one process per table (or tell the series apart by resource
// attributes). It returns a function that unregisters them.
func RegisterMetrics(store Store, cfg *MetricsConfig) (unregister func() error, err error) {
	if store == nil {
		return nil, errors.New("streamq: outbox metrics: store is nil: pass the outbox table (outbox/postgres or outbox/sqlite)")
	}
	var c MetricsConfig
	if cfg != nil {
		c = *cfg
	}
	if c.MeterProvider == nil {
		c.MeterProvider = otel.GetMeterProvider()
	}
	if c.Table == "" {
		c.Table = DefaultTable
	}
	meter := c.MeterProvider.Meter(scopeName)
	rows, err1 := meter.Int64ObservableGauge(MetricRows, metric.WithUnit("{row}"),
		metric.WithDescription("Rows waiting in the outbox table."))
	oldest, err2 := meter.Float64ObservableGauge(MetricOldest, metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest row waiting in the outbox table; 0 when none waits."))
	failing, err3 := meter.Int64ObservableGauge(MetricFailing, metric.WithUnit("{row}"),
		metric.WithDescription("Rows the relay failed to enqueue at least once."))
	lag, err4 := meter.Float64ObservableGauge(MetricLag, metric.WithUnit("s"),
		metric.WithDescription("How long the oldest due row that has not failed has waited for a relay; 0 when none."))
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return nil, fmt.Errorf("streamq: create outbox metric instruments: %w", err)
	}
	table := attribute.String("streamq.outbox.table", c.Table)
	reg, err := meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, metricsTimeout)
		defer cancel()
		b, err := store.Backlog(ctx)
		if err != nil {
			return fmt.Errorf("streamq: outbox metrics: %w", err)
		}
		for _, q := range b.Queues {
			opt := metric.WithAttributes(table, attribute.String("messaging.destination.name", q.Queue))
			o.ObserveInt64(rows, q.Rows, opt)
			o.ObserveFloat64(oldest, q.Oldest.Seconds(), opt)
			o.ObserveFloat64(lag, q.Lag.Seconds(), opt)
			o.ObserveInt64(failing, q.Failing, opt)
		}
		return nil
	}, rows, oldest, lag, failing)
	if err != nil {
		return nil, fmt.Errorf("streamq: register outbox metrics: %w", err)
	}
	return reg.Unregister, nil
}
