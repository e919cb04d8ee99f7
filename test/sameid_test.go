package test

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestSameIDOnTwoInstances: two instances on one log get the same request at the same moment,
// for many ids at once (a client that sent its request to both, or retried on the other after a
// lost answer). Their Begins race on one row: one instance runs the request, the other finds the
// row and answers from it (200 when it is committed by then, 202 while it is not final), and
// neither fails. Each id commits exactly once, on both sides. (The race of two Begins on one row
// that could fail one of them with a unique violation is shown by txlog's
// TestGroupCommitMergedBegins; through the API it is too rare to rely on.)
func TestSameIDOnTwoInstances(t *testing.T) {
	t.Parallel()
	e := newStore(t, envOpts{})
	nodes := []*node{e.startNode(t, "a"), e.startNode(t, "b")}
	const n = 64
	ans := newAnswers()
	var wg sync.WaitGroup
	for i := range n {
		id := fmt.Sprintf("same-%02d", i)
		body := e.orderBody(id, "order")
		start := make(chan struct{})
		for _, nd := range nodes {
			wg.Go(func() {
				<-start
				ans.add(id, "order", nd.post(body))
			})
		}
		close(start)
	}
	wg.Wait()

	reqs, hist := ans.sent(t)
	ans.mu.Lock()
	for id, sts := range ans.all {
		assert.Len(t, sts, 2, "%s", id)
		ok := 0
		for _, st := range sts {
			assert.Contains(t, []int{http.StatusOK, http.StatusAccepted}, st, "%s: answered %v", id, sts)
			if st == http.StatusOK {
				ok++
			}
		}
		assert.Positive(t, ok, "%s: the instance that ran it answers 200: %v", id, sts)
	}
	ans.mu.Unlock()
	e.waitResolved(t, time.Minute)
	committed, _ := e.verify(t, nodes[0].base, reqs)
	assert.Equal(t, n, committed, "every id committed once; answers %v", hist)
	t.Logf("%d ids sent to both instances at once: answers %v", n, hist)
}
