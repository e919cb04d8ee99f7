package client

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// answerCorpus are answers as the coordinator writes them and in the forms it does not, each of
// which unmarshalAnswer must read as encoding/json does.
var answerCorpus = []string{
	`{"id":"a","gid":"g","instance":"i","owner":"o","owner_epoch":7,"one_phase":true,"state":"committed",
	  "kafka":{"transactional_id":"t","producer_id":9007199254740993,"producer_epoch":3,"prepared_state":"9:3",
	    "records":[{"topic":"out","partition":2,"offset":41,"timestamp":"2026-12-07T04:20:11.123456789Z"},{"topic":"out","partition":0,"offset":0}]},
	  "sql":[{"database":"default","rows_affected":1},{"database":"b","rows_affected":2,"rows":[
	    {"n":1,"f":1.5,"big":12345678901234567890,"e":1e400,"s":"x\u0000\u2028\"","null":null,"arr":[1,"2",[3]],"obj":{"k":{"k":true}}}]}],
	  "sql_gids":[{"database":"default","gid":"g_1@default"}],
	  "error":{"participant":"kafka","class":"abortable","message":"m","sqlstate":"40001"},
	  "created_at":"2026-12-07T04:20:11Z","updated_at":"2026-12-07T04:20:11+01:00",
	  "prepared_at":"2026-12-07T04:20:11.5Z","finished_at":null,
	  "events":[{"state":"active","created_at":"2026-12-07T04:20:11Z"},{"state":"aborted","detail":{"class":"x","n":[1,2]},"created_at":"2026-12-07T04:20:12Z"}],
	  "kafka_offsets":{"group_id":"g","generation_id":4,"member_id":"m","group_instance_id":"s","offsets":[{"topic":"in","partition":1,"offset":5,"metadata":"md"}],"after":"prev"},
	  "decision":"external","waiting":true,"decide_by":"2026-12-07T04:21:11Z","prepared_state":"-1:-1"}`,
	`{"ID":"a","State":"committed","KAFKA":{"Records":[{"TOPIC":"t"}]},"Sql":[{"Rows_Affected":3}]}`,
	`{"id":"a","id":"b","state":"aborted","unknown":{"deep":[1,2,{"x":null}]},"sql":null,"kafka":null,"events":null}`,
	"{\"id\":\"a\xff\xfeb\",\"state\":\"committed\",\"sql\":[{\"database\":\"\xc3\",\"rows\":[{\"k\xe2\x82\":\"v\xed\xa0\x80\"}]}]}",
	`{"id":"a","state":"committed","owner_epoch":1.5}`,
	`{"id":"a","state":"committed","owner_epoch":"7"}`,
	`{"id":"a","state":"committed","kafka":{"producer_epoch":40000}}`,
	`{"id":"a","state":"committed","created_at":"yesterday"}`,
	`{"id":"a","state":"committed"} trailing`,
	`{"id":"a","state":"committed",}`,
	`{"error":{"class":"invalid","field":"sql[0].args[1]","message":"not a scalar"}}`,
	`{"error":"plain"}`,
	`{"items":[{"id":"a","state":"prepared"}],"next":"c","in_doubt":true,"transactions":[{"id":"b"}]}`,
	`{"status":"ok","checks":{"postgres":{"ok":true}},"counts":{"prepared":3}}`,
	`[]`, `null`, `""`, `0`, `{}`, ``, `{"id":`,
	`{"id":"\ud800","state":"\u00e9\u0301"}`,
	`{"sql":[{"rows":[{"n":-0,"m":0.000001,"x":1E+2,"y":-9223372036854775809}]}]}`,
}

// answerTypes are the types the client reads answers into (decode and errorOf).
func answerTypes() []func() any {
	return []func() any{
		func() any { return new(Transaction) }, func() any { return new(Page) }, func() any { return new(InDoubtPage) },
		func() any { return new(Status) }, func() any { return new(History) }, func() any { return new(HangingList) },
		func() any { return new(RecoveryResult) }, func() any { return new(Readiness) }, func() any { return new(errorBody) },
	}
}

// TestDecodeAnswerAsEncodingJSON: every answer of the corpus, read into every type the client
// reads answers into, gives what encoding/json's Unmarshal gives: the same value, or an error
// where it fails.
func TestDecodeAnswerAsEncodingJSON(t *testing.T) {
	t.Parallel()
	for i, body := range answerCorpus {
		for _, mk := range answerTypes() {
			t.Run(fmt.Sprintf("%d/%T", i, mk()), func(t *testing.T) {
				t.Parallel()
				sameAsEncodingJSON(t, []byte(body), mk)
			})
		}
	}
}

// FuzzDecodeAnswerAsEncodingJSON: any body reads as encoding/json reads it
// (go test -run '^$' -fuzz FuzzDecodeAnswerAsEncodingJSON -fuzztime 30s ./client/).
func FuzzDecodeAnswerAsEncodingJSON(f *testing.F) {
	for _, body := range answerCorpus {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, mk := range answerTypes() {
			sameAsEncodingJSON(t, body, mk)
		}
	})
}

func sameAsEncodingJSON(t *testing.T, body []byte, mk func() any) {
	t.Helper()
	want, got := mk(), mk()
	werr := json.Unmarshal(body, want)
	gerr := unmarshalAnswer(body, got)
	if werr != nil || gerr != nil {
		assert.Equal(t, werr != nil, gerr != nil, "error: encoding/json %v, unmarshalAnswer %v", werr, gerr)
		return
	}
	if !reflect.DeepEqual(want, got) {
		t.Errorf("body %q:\nencoding/json  %#v\nunmarshalAnswer %#v", body, want, got)
	}
}

// batchAnswer is a committed pipeline batch's answer: n statements and n records.
func batchAnswer(t testing.TB, n int) []byte {
	tx := Transaction{ID: "pl-1", GID: "g", State: StateCommitted, Kafka: &KafkaState{TransactionalID: "t", ProducerID: 1},
		CreatedAt: time.Now(), UpdatedAt: time.Now()}
	for i := range n {
		tx.SQL = append(tx.SQL, SQLResult{Database: "default", RowsAffected: 1})
		tx.Kafka.Records = append(tx.Kafka.Records, RecordOffset{Topic: "shipments-out", Partition: int32(i % 6), Offset: int64(100000 + i), Timestamp: time.Now()})
	}
	b, err := json.Marshal(tx)
	require.NoError(t, err)
	return b
}

// BenchmarkDecodeAnswer reads a pipeline batch's answer (262 statements and records, the
// three-member BenchmarkPipeline's mean batch) with encoding/json (the baseline) and with
// unmarshalAnswer, in one run:
// go test -run '^$' -bench BenchmarkDecodeAnswer -benchtime 500x -count 3 ./client/
func BenchmarkDecodeAnswer(b *testing.B) {
	body := batchAnswer(b, 262)
	for _, c := range []struct {
		name      string
		unmarshal func([]byte, any) error
	}{{"encoding-json", json.Unmarshal}, {"unmarshalAnswer", unmarshalAnswer}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var tx Transaction
				if err := c.unmarshal(body, &tx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkBatchBody builds a pipeline batch's body of four polls of 100 statements and records
// each: encoding every poll to count its bytes and then the whole request again (the baseline,
// as the client did) against the parts encoded once (pendingBatch.body):
// go test -run '^$' -bench BenchmarkBatchBody -benchtime 500x -count 3 ./client/
func BenchmarkBatchBody(b *testing.B) {
	var polls [4]*pendingBatch // the transformed polls' statements and records, not encoded
	for i := range polls {
		polls[i] = part(100, strings.Repeat("v", 20), "")
	}
	b.Run("encoded-twice", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var sql []Statement
			var kafka []Record
			for _, p := range polls {
				a, err1 := json.Marshal(p.sql)
				c, err2 := json.Marshal(p.kafka)
				if err1 != nil || err2 != nil || len(a)+len(c) == 0 {
					b.Fatal(err1, err2)
				}
				sql, kafka = append(sql, p.sql...), append(kafka, p.kafka...)
			}
			if _, err := json.Marshal(TransactionRequest{ID: "pl-1", SQL: sql, Kafka: kafka}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoded-once", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			first := newPending(polls[0].batch, slices.Clip(polls[0].sql), slices.Clip(polls[0].kafka))
			for _, p := range polls[1:] {
				if !first.join(newPending(p.batch, p.sql, p.kafka), 1000, DefaultRequestLimits) {
					b.Fatal("join")
				}
			}
			if _, err := first.body("pl-1", nil, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}
