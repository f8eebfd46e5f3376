package postgres_test

import (
	"context"
	"log"

	"github.com/streamq/streamq/writebehind"
	"github.com/streamq/streamq/writebehind/postgres"
)

// Example opens a PostgreSQL pool and creates a sink on table cache.users
// (the schema must exist), ready for writebehind.NewHandler.
func Example() {
	db, err := postgres.Open("postgres://app@localhost:5432/app?sslmode=disable")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(8) // stay below the server's max_connections

	sink, err := postgres.NewSink(db, &writebehind.SQLSinkConfig{Table: "cache.users"})
	if err != nil {
		log.Fatal(err)
	}
	if err := sink.CreateSchema(context.Background()); err != nil {
		log.Fatal(err)
	}
	h, err := writebehind.NewHandler(sink, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close()
	// Run a streamq.Consumer with h on the writer's queue.
}
