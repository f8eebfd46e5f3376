package sqlite_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/streamq/streamq/writebehind"
	"github.com/streamq/streamq/writebehind/sqlite"
)

// Example opens an SQLite database, creates a sink's table and writes two
// versions of a key: the older one, replayed after the newer, changes
// nothing.
func Example() {
	dir, err := os.MkdirTemp("", "streamq-sqlite-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)

	db, err := sqlite.Open(filepath.Join(dir, "users.db"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	sink, err := sqlite.NewSink(db, &writebehind.SQLSinkConfig{Table: "users"})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	if err := sink.CreateSchema(ctx); err != nil {
		fmt.Println(err)
		return
	}
	// A handler from writebehind.NewHandler(sink, nil) makes these calls.
	for _, ch := range []writebehind.Change{
		{Key: "user:42", Value: []byte(`{"name":"Ada"}`), Version: 2},
		{Key: "user:42", Value: []byte(`{"name":"old"}`), Version: 1}, // a replay
	} {
		if err := sink.Write(ctx, []writebehind.Change{ch}); err != nil {
			fmt.Println(err)
			return
		}
	}

	value, version, _, _, err := sink.Get(ctx, "user:42")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s at version %d\n", value, version)
	// Output: {"name":"Ada"} at version 2
}
