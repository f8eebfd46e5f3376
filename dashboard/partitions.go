package dashboard

import (
	"context"
	"net/http"
	"strconv"
	"strings"

	"github.com/streamq/streamq/inspect"
)

// partitionsData is the partitions page of a queue.
type partitionsData struct {
	Name        string
	Write, Read int   // partitions producers write to, and read
	Epoch       int64 // changes of the number of partitions
	Total       *inspect.Overview
	Partitions  []partitionRow
	Last        int // the last partition read (Read - 1)
}

// partitionRow is one partition of the partitions page.
type partitionRow struct {
	Index    int
	Overview *inspect.Overview
	URL      string
	Draining bool
}

// partitions shows the partitions of a queue (see inspect.Partitioned):
// how many producers write to and workers read, the epoch, and each one's
// counts with their sum. Setting the number stays with the CLI
// (`streamq partitions set` and `finish`).
func (s *server) partitions(w http.ResponseWriter, r *http.Request) {
	s.queueTab(w, r, "partitions", "partitions", false, func(ctx context.Context, q *inspect.Queue, _ *inspect.Overview) (any, error) {
		p, err := s.in.Partitioned(ctx, q.Name())
		if err != nil {
			return nil, err
		}
		d := &partitionsData{Name: p.Name(), Epoch: p.Epoch()}
		d.Write, d.Read = p.Partitions()
		d.Last = d.Read - 1
		if d.Total, err = p.Overview(ctx); err != nil {
			return nil, err
		}
		for k, pq := range p.Queues() {
			ov, err := s.ovs.get(ctx, pq)
			if err != nil {
				return nil, err
			}
			d.Partitions = append(d.Partitions, partitionRow{Index: k, Overview: ov, Draining: k >= d.Write,
				URL: pathOf(s.opts.BasePath, "queues", pq.Name())})
		}
		return d, nil
	})
}

// partitionOf returns the partitioned queue that the queue name would be
// partition k ≥ 1 of: "orders#3" is partition 3 of "orders".
func partitionOf(name string) (base string, ok bool) {
	i := strings.LastIndex(name, "#")
	if i <= 0 {
		return "", false
	}
	k, err := strconv.Atoi(name[i+1:])
	if err != nil || k < 1 || strconv.Itoa(k) != name[i+1:] {
		return "", false
	}
	return name[:i], true
}

// markPartitions marks the rows of the overview that are partitions of
// another row's queue, and those queues.
func markPartitions(rows []overviewRow) {
	index := make(map[string]int, len(rows))
	for i, row := range rows {
		index[row.Info.Name] = i
	}
	for i, row := range rows {
		base, ok := partitionOf(row.Info.Name)
		if j, listed := index[base]; ok && listed {
			rows[i].PartOf = base
			rows[j].Partitioned = true
		}
	}
}
