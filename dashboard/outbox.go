package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"golang.org/x/sync/errgroup"

	"github.com/streamq/streamq/inspect"
	"github.com/streamq/streamq/outbox"
)

// Outbox is an SQL outbox table (package outbox) whose backlog the
// dashboard shows: the rows waiting per queue, the oldest's age, the
// relays' lag and the rows that failed. Opening the database and the table
// is the caller's: the dashboard links no SQL driver.
type Outbox struct {
	// Name labels the table on the pages, such as "orders-db". Required;
	// unique among Options.Outboxes.
	Name string
	// Store is the table, from outbox/postgres.New or outbox/sqlite.New.
	// Required.
	Store outbox.Store
}

// checkOutboxes says what is wrong with Options.Outboxes.
func checkOutboxes(obs []Outbox) error {
	seen := map[string]bool{}
	for i, ob := range obs {
		switch {
		case strings.TrimSpace(ob.Name) == "":
			return fmt.Errorf("dashboard: Outboxes[%d] has no Name: name the table as the pages should show it, like \"orders-db\"", i)
		case ob.Store == nil:
			return fmt.Errorf("dashboard: Outboxes[%d] (%q) has no Store: pass the table from outbox/postgres.New or outbox/sqlite.New", i, ob.Name)
		case seen[ob.Name]:
			return fmt.Errorf("dashboard: Outboxes holds %q twice: give each table a name of its own", ob.Name)
		}
		seen[ob.Name] = true
	}
	return nil
}

// outboxRow is the backlog of one outbox table, or the error reading it.
type outboxRow struct {
	Name    string
	Backlog *outbox.Backlog
	Err     string
}

// outboxBacklogs reads the backlog of every outbox table, a few at a time;
// a table that cannot be read shows its error without hiding the others.
func (s *server) outboxBacklogs(ctx context.Context) []outboxRow {
	rows := make([]outboxRow, len(s.opts.Outboxes))
	var g errgroup.Group
	g.SetLimit(4)
	for i, ob := range s.opts.Outboxes {
		rows[i].Name = ob.Name
		g.Go(func() error {
			b, err := inspect.OutboxBacklog(ctx, ob.Store)
			if err != nil {
				rows[i].Err = err.Error()
				return nil
			}
			if s.opts.HidePayloads {
				for k := range b.Queues {
					if b.Queues[k].LastError != "" {
						b.Queues[k].LastError = "(hidden)"
					}
				}
			}
			rows[i].Backlog = b
			return nil
		})
	}
	_ = g.Wait()
	return rows
}

// outbox shows the backlog of every outbox table, per queue.
func (s *server) outbox(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), pageTimeout)
	defer cancel()
	s.render(w, r, http.StatusOK, "outbox", &view{Title: "Outbox", Tab: "outbox", LiveURL: s.live(r), Data: s.outboxBacklogs(ctx)})
}
