package client

import (
	"context"
	"encoding/json"
	"net/http"
	"time"
)

// History is this process's metrics over the last window (operation getHistory): Times[i]
// (Unix seconds, oldest first) ends interval i, Series[name][i] is its value, nil where the
// figure was not exported. The series' names are the spec's (schema History).
type History struct {
	Instance        string                `json:"instance"`
	IntervalSeconds float64               `json:"interval_seconds"`
	WindowSeconds   float64               `json:"window_seconds"`
	Times           []float64             `json:"times"`
	Series          map[string][]*float64 `json:"series"`

	Raw json.RawMessage `json:"-"`
}

// History reads the coordinator's in-memory metrics history (operation getHistory; the read
// role).
func (c *Client) History(ctx context.Context) (*History, error) {
	a, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/history"})
	if err != nil {
		return nil, err
	}
	var h History
	if err := decode(a, &h); err != nil {
		return nil, err
	}
	h.Raw = a.body
	return &h, nil
}

// HangingTransaction is a partition holding a transaction of the coordinator's ids open
// while Kafka completed it (schema HangingTxn).
type HangingTransaction struct {
	TransactionalID  string    `json:"transactional_id"`
	ProducerID       int64     `json:"producer_id"`
	ProducerEpoch    int16     `json:"producer_epoch"`
	CoordinatorEpoch int32     `json:"coordinator_epoch"`
	Topic            string    `json:"topic"`
	Partition        int32     `json:"partition"`
	StartOffset      int64     `json:"start_offset"`
	LastWrite        time.Time `json:"last_write"`
	KafkaState       string    `json:"kafka_state"`
	FoundAt          time.Time `json:"found_at"`
	AgeSeconds       float64   `json:"age_seconds"`
}

// HangingLogTxn is a logged transaction whose records a hanging transaction holds.
type HangingLogTxn struct {
	ID          string `json:"id"`
	GID         string `json:"gid"`
	State       State  `json:"state"`
	FirstOffset int64  `json:"first_offset"`
}

// Hanging is one hanging transaction and what the recovery loop's repair does: Repair is
// commit, abort (the marker it writes), wait, operator or unknown; RepairNote says why.
type Hanging struct {
	HangingTransaction
	Status     string          `json:"status"`
	Note       string          `json:"note,omitempty"`
	Log        []HangingLogTxn `json:"log"`
	Repair     string          `json:"repair"`
	RepairNote string          `json:"repair_note"`
}

// HangingRepaired is a repair made since the coordinator started: the marker it wrote.
type HangingRepaired struct {
	HangingTransaction
	Marker     string          `json:"marker"`
	RepairedAt time.Time       `json:"repaired_at"`
	Log        []HangingLogTxn `json:"log"`
}

// HangingList is the answer of operation listHangingKafkaTransactions.
type HangingList struct {
	Kafka         bool              `json:"kafka"`
	Hanging       []Hanging         `json:"hanging"`
	Repaired      []HangingRepaired `json:"repaired"`
	RepairedTotal int64             `json:"repaired_total"`
	Warnings      []string          `json:"warnings,omitempty"`

	Raw json.RawMessage `json:"-"`
}

// HangingKafkaTransactions lists the hanging Kafka transactions and the recent repairs
// (operation listHangingKafkaTransactions; the read role).
func (c *Client) HangingKafkaTransactions(ctx context.Context) (*HangingList, error) {
	a, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/kafka/hanging"})
	if err != nil {
		return nil, err
	}
	var l HangingList
	if err := decode(a, &l); err != nil {
		return nil, err
	}
	l.Raw = a.body
	return &l, nil
}
