package test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kpgtx/coordinator/service"
)

// offsetsBody is an order request that also commits the group's offsets for the input topic.
func offsetsBody(e *env, id string, oc map[string]any, withRecord bool) map[string]any {
	b := map[string]any{
		"id": id,
		"sql": []any{map[string]any{
			"statement": "INSERT INTO orders (id, total) VALUES ($1, $2)", "args": []any{id, 1},
		}},
		"kafka_offsets": oc,
	}
	if withRecord {
		b["kafka"] = []any{map[string]any{"topic": e.topic, "key": id, "value": "shipped"}}
	}
	return b
}

func unfenced(group, topic string, offsets map[int32]int64) map[string]any {
	var os []any
	for p, o := range offsets {
		os = append(os, map[string]any{"topic": topic, "partition": p, "offset": o})
	}
	return map[string]any{"group_id": group, "offsets": os}
}

// groupOffsets reads the group's committed offsets of topic as a read_committed member would:
// stable offsets only (KIP-447), waiting while a decided transaction's markers are still being
// written.
func (e *env) groupOffsets(group, topic string) map[int32]int64 {
	e.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...))
	require.NoError(e.t, err)
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		resps, err := adm.FetchOffsets(ctx, group)
		if err == nil {
			err = resps.Error()
		}
		if err == nil {
			out := map[int32]int64{}
			resps.Each(func(o kadm.OffsetResponse) {
				if o.Topic == topic {
					out[o.Partition] = o.At
				}
			})
			return out
		}
		require.NoError(e.t, ctx.Err(), "fetching the offsets of group %s: %v", group, err)
		time.Sleep(50 * time.Millisecond)
	}
}

// waitOffsets reads the group's offsets of topic until they hold want (at most 10 s) and returns
// the last read. A commit is answered once Kafka decided it; the group applies the offsets when
// the transaction's marker reaches it a moment later, and a stable fetch in between was seen to
// return the previous offsets (client.RunPipeline waits for them at a revocation).
func (e *env) waitOffsets(group, topic string, want map[int32]int64) map[int32]int64 {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := e.groupOffsets(group, topic)
		ok := true
		for p, o := range want {
			ok = ok && got[p] == o
		}
		if ok || time.Now().After(deadline) {
			return got
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestOffsetsCommitWithTransaction: the offsets become the group's with the rows and records,
// GET shows them, and a request that aborts moves the group nowhere.
func TestOffsetsCommitWithTransaction(t *testing.T) {
	t.Parallel()
	if useKfake() {
		t.Skip("needs the real broker's group coordinator (KAFKA_BROKERS)")
	}
	// One transactional id: every request reuses the producer the one before ended (an offsets
	// only transaction is ended by its ids, and its client recreated).
	e := newEnv(t, envOpts{poolSize: 1})
	input := e.prefix + "-in"
	e.createTopic(input, 3)
	group := e.prefix + "-g"

	cases := []struct {
		name       string
		withRecord bool
	}{
		{"offsets with rows and records", true},
		{"offsets with rows only (the Kafka to PostgreSQL sink)", false},
		{"offsets with rows only, once more on the same id", false},
		{"offsets with rows and records after an offsets-only one", true},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id := fmt.Sprintf("ok-%d", i)
			want := map[int32]int64{0: int64(10 * (i + 1)), 2: int64(7 * (i + 1))}
			r := e.post(offsetsBody(e, id, unfenced(group, input, want), tc.withRecord))
			require.Equal(t, http.StatusOK, r.Status, "%s", r.Raw)
			assert.Equal(t, group, r.str("kafka_offsets", "group_id"))
			assert.Equal(t, 1, countRows(t, e.db, id))
			assert.Equal(t, want, e.waitOffsets(group, input, want))

			g := e.do(http.MethodGet, "/v1/transactions/"+id, nil)
			require.Equal(t, http.StatusOK, g.Status)
			assert.Equal(t, "committed", g.str("state"))
			assert.Equal(t, group, g.str("kafka_offsets", "group_id"), "the offsets are logged with prepared")
			require.Len(t, g.get("kafka_offsets", "offsets"), 2)
		})
	}

	t.Run("offsets alone", func(t *testing.T) {
		r := e.post(map[string]any{"id": "alone", "kafka_offsets": unfenced(group, input, map[int32]int64{1: 3})})
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Raw)
		assert.Equal(t, []any{}, r.get("kafka", "records"), "no record: an empty list")
		assert.Equal(t, int64(3), e.waitOffsets(group, input, map[int32]int64{1: 3})[1])
	})

	t.Run("an aborted request commits no offset", func(t *testing.T) {
		before := e.groupOffsets(group, input)
		// An order id that exists: the insert fails, so nothing may commit, the offsets neither.
		r := e.post(map[string]any{"id": "dup", "sql": []any{map[string]any{
			"statement": "INSERT INTO orders (id, total) VALUES ('ok-0', 1)"}},
			"kafka":         []any{map[string]any{"topic": e.topic, "key": "dup", "value": "x"}},
			"kafka_offsets": unfenced(group, input, map[int32]int64{0: 99, 1: 55})})
		require.Equal(t, http.StatusConflict, r.Status, "%s", r.Raw)
		assert.Equal(t, before, e.groupOffsets(group, input), "the aborted request's offsets are not the group's")
		assert.Zero(t, e.committedWithKey("dup"))
	})
	e.settled()
	assert.Empty(t, e.preparedLeft())
}

// joinGroup makes a classic group member of topic and returns it with its member id and
// generation once it has its assignment.
func (e *env) joinGroup(group, topic string) (*kgo.Client, string, int32) {
	e.t.Helper()
	assigned := make(chan struct{}, 1)
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.DisableAutoCommit(), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) {
			select {
			case assigned <- struct{}{}:
			default:
			}
		}))
	require.NoError(e.t, err)
	e.t.Cleanup(cl.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	go func() {
		for ctx.Err() == nil {
			cl.PollFetches(ctx)
		}
	}()
	select {
	case <-assigned:
	case <-ctx.Done():
		e.t.Fatalf("member of group %s got no assignment", group)
	}
	member, gen := cl.GroupMetadata()
	require.NotEmpty(e.t, member)
	return cl, member, gen
}

// TestOffsetsFencedGeneration (KIP-447): a commit with the member's generation commits; one
// with a generation the group has moved past is refused by the group: 409 naming the group and
// the class, and nothing of the request commits on either side.
func TestOffsetsFencedGeneration(t *testing.T) {
	t.Parallel()
	if useKfake() {
		t.Skip("needs the real broker's group coordinator (KAFKA_BROKERS)")
	}
	e := newEnv(t, envOpts{poolSize: 1})
	input := e.prefix + "-in"
	e.createTopic(input, 2)
	group := e.prefix + "-g"
	_, member, gen := e.joinGroup(group, input)

	fenced := func(gen int32, member string, offset int64) map[string]any {
		oc := unfenced(group, input, map[int32]int64{0: offset})
		oc["generation_id"], oc["member_id"] = gen, member
		return oc
	}
	r := e.post(offsetsBody(e, "current", fenced(gen, member, 5), true))
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Raw)
	assert.Equal(t, int64(5), e.waitOffsets(group, input, map[int32]int64{0: 5})[0])

	cases := []struct {
		name   string
		gen    int32
		member string
		code   string
	}{
		{"a generation the group moved past", gen + 1, member, "ILLEGAL_GENERATION"},
		{"a member the group does not know", gen, member + "-gone", "UNKNOWN_MEMBER_ID"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id := fmt.Sprintf("zombie-%d", i)
			r := e.post(offsetsBody(e, id, fenced(tc.gen, tc.member, 50), true))
			require.Equal(t, http.StatusConflict, r.Status, "%s", r.Raw)
			assert.Equal(t, "aborted", r.str("state"))
			assert.Equal(t, "kafka_group", r.str("error", "participant"))
			assert.Equal(t, "fenced", r.str("error", "class"))
			msg := r.str("error", "message")
			assert.True(t, strings.Contains(msg, group) && strings.Contains(msg, tc.code), "the error names the group and the code: %s", msg)
			assert.Equal(t, 0, countRows(t, e.db, id), "no row")
			assert.Zero(t, e.committedWithKey(id), "no record")
			assert.Equal(t, int64(5), e.groupOffsets(group, input)[0], "the group's offset did not move")
		})
	}
	e.settled()
	assert.Empty(t, e.preparedLeft())
}

// TestOffsetsValidation: malformed offsets are refused with the field named; nothing runs.
func TestOffsetsValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{configure: func(c *service.Config) { c.Topics = []string{"allowed-*"} }})
	off := func(mod func(oc map[string]any)) map[string]any {
		oc := map[string]any{"group_id": "g", "offsets": []any{map[string]any{"topic": "allowed-in", "partition": 0, "offset": 1}}}
		mod(oc)
		return map[string]any{"sql": []any{map[string]any{"statement": "SELECT 1"}}, "kafka_offsets": oc}
	}
	cases := []struct {
		name  string
		body  map[string]any
		field string
	}{
		{"no group", off(func(oc map[string]any) { oc["group_id"] = "" }), "kafka_offsets.group_id"},
		{"no offsets", off(func(oc map[string]any) { oc["offsets"] = []any{} }), "kafka_offsets.offsets"},
		{"generation without member", off(func(oc map[string]any) { oc["generation_id"] = 3 }), "kafka_offsets.member_id"},
		{"member without generation", off(func(oc map[string]any) { oc["member_id"] = "m" }), "kafka_offsets.generation_id"},
		{"negative offset", off(func(oc map[string]any) {
			oc["offsets"] = []any{map[string]any{"topic": "allowed-in", "partition": 0, "offset": -1}}
		}), "kafka_offsets.offsets[0].offset"},
		{"a topic off the allowlist", off(func(oc map[string]any) {
			oc["offsets"] = []any{map[string]any{"topic": "secret", "partition": 0, "offset": 1}}
		}), "kafka_offsets.offsets[0].topic"},
		{"one partition twice", off(func(oc map[string]any) {
			p := map[string]any{"topic": "allowed-in", "partition": 0, "offset": 1}
			oc["offsets"] = []any{p, p}
		}), "kafka_offsets.offsets[1]"},
		{"an unknown field", off(func(oc map[string]any) { oc["generation"] = 1 }), "kafka_offsets.generation"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := e.post(tc.body)
			require.Equal(t, http.StatusBadRequest, r.Status, "%s", r.Raw)
			assert.Equal(t, tc.field, r.str("error", "field"), "%s", r.Raw)
		})
	}
}
