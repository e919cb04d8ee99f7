package txntype

import (
	"fmt"
	"strconv"
	"unicode"
)

// OffsetCommit is a consumer group's offsets, committed by the request's Kafka transaction
// (TxnOffsetCommit): they become visible to the group exactly when the request's rows and
// records commit, and never otherwise (docs/design.md, O1-O3).
//
// With GenerationID ≥ 0 and MemberID (and GroupInstanceID for a static member) the group
// coordinator fences the commit (KIP-447): a member that a rebalance moved on is refused, and the
// whole request aborts with the group named (ParticipantKafkaGroup, ClassFenced). Without them
// (GenerationID nil or -1) the commit is unfenced, for consumers that assign partitions
// themselves.
type OffsetCommit struct {
	GroupID         string            `json:"group_id"`
	GenerationID    *int32            `json:"generation_id,omitempty"`
	MemberID        string            `json:"member_id,omitempty"`
	GroupInstanceID *string           `json:"group_instance_id,omitempty"`
	Offsets         []PartitionOffset `json:"offsets"`
	// After is the request id of the same member's batch sent before this one, when that one
	// may still be in flight (O4, coord/chain.go): this request's offsets are sent only after
	// that one's were appended, and it commits only if that one committed. Empty: no chain.
	After string `json:"after,omitempty"`
}

// PartitionOffset is one partition's offset to commit: the next offset to read (Kafka's
// convention: the last processed + 1).
type PartitionOffset struct {
	Topic     string  `json:"topic"`
	Partition int32   `json:"partition"`
	Offset    int64   `json:"offset"`
	Metadata  *string `json:"metadata,omitempty"`
}

// Fenced reports whether the commit carries a member's generation (KIP-447 fencing).
func (o *OffsetCommit) Fenced() bool { return o.GenerationID != nil && *o.GenerationID >= 0 }

// Generation is the generation sent to Kafka: -1 when unfenced.
func (o *OffsetCommit) Generation() int32 {
	if o.Fenced() {
		return *o.GenerationID
	}
	return -1
}

// ParticipantKafkaGroup names the consumer group's coordinator in an error: the party that
// refused a request's offsets (a fenced member, an ACL), as opposed to the Kafka transaction.
const ParticipantKafkaGroup = "kafka_group"

// MaxOffsetMetadata is Kafka's default offset.metadata.max.bytes: a longer metadata string is
// refused by the broker (OFFSET_METADATA_TOO_LARGE), so it is refused before anything runs.
const MaxOffsetMetadata = 4096

// maxGroupID bounds a group id: Kafka sets no limit, but a group id is a key in every offset
// record of __consumer_offsets.
const maxGroupID = 255

// validate checks the offsets (nil: none) the way Request.Validate checks the rest; the error
// names the field.
func (o *OffsetCommit) validate(l Limits, id string) error {
	if o == nil {
		return nil
	}
	const f = "kafka_offsets"
	switch {
	case o.After != "" && !idPattern.MatchString(o.After):
		return Invalid(f+".after", "must be a request id: 1-128 characters of [A-Za-z0-9._:-]")
	case o.After != "" && o.After == id:
		return Invalid(f+".after", "names this request itself: it names the request sent before this one")
	}
	if o.GroupID == "" {
		return Invalid(f+".group_id", "must not be empty")
	}
	if len(o.GroupID) > maxGroupID || !printable(o.GroupID) {
		return Invalid(f+".group_id", fmt.Sprintf("must be 1-%d printable characters", maxGroupID))
	}
	switch {
	case o.GenerationID != nil && *o.GenerationID < -1:
		return Invalid(f+".generation_id", "must be -1 (unfenced) or a generation ≥ 0")
	case o.Fenced() && o.MemberID == "":
		return Invalid(f+".member_id", "a fenced commit (generation_id ≥ 0) needs the member id of that generation")
	case !o.Fenced() && (o.MemberID != "" || o.GroupInstanceID != nil):
		return Invalid(f+".generation_id", "member_id and group_instance_id fence a commit only with its generation_id: give it, or neither")
	case o.GroupInstanceID != nil && *o.GroupInstanceID == "":
		return Invalid(f+".group_instance_id", "must not be empty (null: a dynamic member)")
	}
	if len(o.MemberID) > maxGroupID || !printable(o.MemberID) {
		return Invalid(f+".member_id", fmt.Sprintf("must be at most %d printable characters", maxGroupID))
	}
	if len(o.Offsets) == 0 {
		return Invalid(f+".offsets", "must not be empty")
	}
	if l.MaxRecords > 0 && len(o.Offsets) > l.MaxRecords {
		return Invalid(f+".offsets", fmt.Sprintf("%d offsets, at most %d allowed", len(o.Offsets), l.MaxRecords))
	}
	type tp struct {
		topic     string
		partition int32
	}
	seen := make(map[tp]int, len(o.Offsets))
	for i, po := range o.Offsets {
		field := f + ".offsets[" + strconv.Itoa(i) + "]"
		if po.Topic == "" {
			return Invalid(field+".topic", "must not be empty")
		}
		// The allowlist of record topics applies to the offsets' topics too: a coordinator that
		// may not write a topic may not move a group's position on it either.
		if err := l.allowTopic(field, po.Topic); err != nil {
			return err
		}
		if po.Partition < 0 {
			return Invalid(field+".partition", "must not be negative")
		}
		if po.Offset < 0 {
			return Invalid(field+".offset", "must not be negative (the next offset to read: the last processed + 1)")
		}
		if po.Metadata != nil && len(*po.Metadata) > MaxOffsetMetadata {
			return Invalid(field+".metadata", fmt.Sprintf("%d bytes, at most %d allowed (offset.metadata.max.bytes)", len(*po.Metadata), MaxOffsetMetadata))
		}
		k := tp{po.Topic, po.Partition}
		if j, dup := seen[k]; dup {
			return Invalid(field, fmt.Sprintf("%s partition %d is given twice (also offsets[%d]): one offset per partition", po.Topic, po.Partition, j))
		}
		seen[k] = i
	}
	return nil
}

func printable(s string) bool {
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}
