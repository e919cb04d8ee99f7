package test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kpgtx/coordinator/txntype"
	"github.com/stretchr/testify/assert"
)

// offsetsCrashBody is a request that commits offset n+1 of partition 0 of input for a group of
// its own (g-<id>), with a row and a record ("offsets"), a row only ("offsets-sql"), or a row
// and a failing statement ("offsets-fail").
func (e *env) offsetsCrashBody(id, kind, input string, n int) string {
	oc := fmt.Sprintf(`{"group_id":"g-%s","offsets":[{"topic":%q,"partition":0,"offset":%d}]}`, id, input, n+1)
	row := fmt.Sprintf(`{"statement":"INSERT INTO orders (id, total) VALUES ($1, 1)","args":[%q]}`, id)
	rec := fmt.Sprintf(`{"topic":%q,"key":%q,"value":"v"}`, e.topic, id)
	switch kind {
	case "offsets-sql":
		return fmt.Sprintf(`{"id":%q,"sql":[%s],"kafka_offsets":%s}`, id, row, oc)
	case "offsets-fail":
		return fmt.Sprintf(`{"id":%q,"sql":[%s,{"statement":"SELECT 1/0"}],"kafka":[%s],"kafka_offsets":%s}`, id, row, rec, oc)
	}
	return fmt.Sprintf(`{"id":%q,"sql":[%s],"kafka":[%s],"kafka_offsets":%s}`, id, row, rec, oc)
}

// TestOffsetsFaultPoints kills the coordinator at every step boundary while requests with
// offsets run, restarts it, and checks that recovery commits or aborts each request's offsets
// with its rows and records, by the stored ids (O1): a committed request's group has its
// offset, an aborted (or never logged) one's has none.
func TestOffsetsFaultPoints(t *testing.T) {
	t.Parallel()
	if useKfake() {
		t.Skip("needs the real broker's group coordinator (KAFKA_BROKERS)")
	}
	for _, point := range txntype.FaultPoints {
		if point == txntype.FaultDecidedBeforePhase2 {
			continue // reached only by a request answered at its decision (TestFaultPoints)
		}
		t.Run(string(point), func(t *testing.T) {
			t.Parallel()
			e := newStore(t, envOpts{})
			input := e.prefix + "-in"
			e.createTopic(input, 1)
			n := e.startNode(t, "a", "COORDINATOR_FAULT="+string(point))
			kinds := []string{"offsets", "offsets-sql", "offsets", "offsets-fail", "offsets-sql", "offsets", "order"}
			reqs := map[string]sent{}
			var mu sync.Mutex
			var wg sync.WaitGroup
			for i, kind := range kinds {
				id := fmt.Sprintf("o%02d", i)
				body := e.orderBody(id, kind)
				if kind != "order" {
					body = e.offsetsCrashBody(id, kind, input, i)
				}
				wg.Go(func() {
					st := n.post(body)
					mu.Lock()
					// verify's shapes: offsets-sql has no record, offsets-fail must not commit.
					shape := map[string]string{"offsets": "order", "offsets-sql": "sql-only", "offsets-fail": "fail"}[kind]
					if shape == "" {
						shape = kind
					}
					reqs[id] = sent{kind: shape, status: st}
					mu.Unlock()
				})
			}
			wg.Wait()
			n.waitExit(30 * time.Second) // the fault point killed it
			n2 := e.startNode(t, "a")
			e.waitResolved(t, 60*time.Second)
			c, a := e.verify(t, n2.base, reqs)
			for i, kind := range kinds {
				if kind == "order" {
					continue
				}
				id := fmt.Sprintf("o%02d", i)
				r := call(t, "GET", n2.base+"/v1/transactions/"+id, "")
				committed := r.str("state") == "committed"
				want := map[int32]int64{}
				if committed {
					want[0] = int64(i + 1)
				}
				got, has := e.waitOffsets("g-"+id, input, want)[0]
				if committed {
					assert.True(t, has && got == int64(i+1), "%s committed: its group's offset is %d (has %v), want %d", id, got, has, i+1)
					assert.Equal(t, "g-"+id, r.str("kafka_offsets", "group_id"), "%s: GET shows the logged offsets", id)
				} else {
					assert.False(t, has, "%s %s: its group has no offset, found %d", id, r.str("state"), got)
				}
			}
			t.Logf("%s: %d committed, %d aborted", point, c, a)
		})
	}
}
