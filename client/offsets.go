package client

// ParticipantKafkaGroup is the participant an error names when the consumer group's
// coordinator refused a request's offsets (Error.Participant).
const ParticipantKafkaGroup = "kafka_group"

// OffsetCommit is a consumer group's offsets committed by the request's Kafka transaction
// (schema OffsetCommit): the group sees them exactly when the rows and records commit. With
// GenerationID ≥ 0 and MemberID the group fences the commit (KIP-447): a member a rebalance
// moved on gets an error matching ErrGroupFenced, and nothing of the request commits. A nil
// GenerationID (or -1) commits unfenced.
type OffsetCommit struct {
	GroupID         string            `json:"group_id"`
	GenerationID    *int32            `json:"generation_id,omitempty"`
	MemberID        string            `json:"member_id,omitempty"`
	GroupInstanceID *string           `json:"group_instance_id,omitempty"`
	Offsets         []PartitionOffset `json:"offsets"`
	// After is the id of the same member's batch sent before this one, which may still be in
	// flight (rule O4): this one commits only if that one committed, and its offsets go after
	// that one's. RunPipeline sets it for every batch of its window but the first.
	After string `json:"after,omitempty"`
}

// PartitionOffset is one partition's offset (OffsetCommit.offsets[]): the next offset to read,
// the last processed + 1.
type PartitionOffset struct {
	Topic     string  `json:"topic"`
	Partition int32   `json:"partition"`
	Offset    int64   `json:"offset"`
	Metadata  *string `json:"metadata,omitempty"`
}
