// Command outbox-crash-relay is the relay process of the outbox's crash
// test: it relays one batch of an outbox table and, once Redis accepted the
// batch's jobs and before the rows are removed, prints "sent <n>" and
// blocks, for the test to SIGKILL it there.
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/outbox"
	"github.com/streamq/streamq/outbox/postgres"
	"github.com/streamq/streamq/outbox/sqlite"
	wbpostgres "github.com/streamq/streamq/writebehind/postgres"
	wbsqlite "github.com/streamq/streamq/writebehind/sqlite"
)

func main() {
	addr := flag.String("redis", "", "Redis host:port")
	queue := flag.String("queue", "", "queue name")
	driver := flag.String("driver", "", "sqlite or postgres")
	dsn := flag.String("dsn", "", "PostgreSQL DSN or SQLite file")
	table := flag.String("table", "", "outbox table")
	lease := flag.Duration("lease", time.Second, "SQLite lease")
	flag.Parse()
	ctx := context.Background()

	var db *sql.DB
	var store outbox.Store
	var err error
	switch *driver {
	case "sqlite":
		if db, err = wbsqlite.Open(*dsn); err == nil {
			store, err = sqlite.New(db, &sqlite.Config{Table: *table, Lease: *lease})
		}
	case "postgres":
		if db, err = wbpostgres.Open(*dsn); err == nil {
			store, err = postgres.New(db, &postgres.Config{Table: *table, NoNotify: true})
		}
	default:
		err = fmt.Errorf("unknown driver %q", *driver)
	}
	if err != nil {
		log.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: *addr})
	q, err := streamq.NewQueue(c, *queue, nil)
	if err != nil {
		log.Fatal(err)
	}
	p, err := streamq.NewProducer(q, nil)
	if err != nil {
		log.Fatal(err)
	}
	r, err := outbox.NewRelay(stopBeforeRemoval{store}, &outbox.RelayConfig{Producers: []*streamq.Producer{p}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("ready")
	if _, err := r.RunOnce(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Fprintln(os.Stderr, "the batch finished: the test should have killed the relay before")
	os.Exit(2)
}

// stopBeforeRemoval is a store whose claims block where they would remove
// the relayed rows.
type stopBeforeRemoval struct{ outbox.Store }

func (s stopBeforeRemoval) Claim(ctx context.Context, n int) (outbox.Claim, error) {
	c, err := s.Store.Claim(ctx, n)
	if err != nil {
		return nil, err
	}
	return blockingClaim{c}, nil
}

type blockingClaim struct{ outbox.Claim }

func (c blockingClaim) Finish(_ context.Context, done []string, _ []outbox.Failure) ([]string, error) {
	fmt.Printf("sent %d\n", len(done))
	select {} // killed here
}
