package txlog

// SeparateBegins turns off the merging of a flush's Begins into one statement (the baseline of
// BenchmarkBegin).
func (l *Log) SeparateBegins() { l.group.separate = true }

// PreparedBatchSQL and CommittedBatchSQL are the batch writes' statements, for their plans.
var PreparedBatchSQL, CommittedBatchSQL = preparedBatchSQL, committedBatchSQL
