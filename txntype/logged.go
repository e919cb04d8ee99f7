package txntype

// loggedDetail is what the log last stored of a transaction's bulky columns: the SQL results
// and the Kafka records, as the slices that write was given. A pipeline batch carries hundreds
// of each, and the final write would send them again, unchanged, after the prepared write
// stored them (txlog.Log.Prepared, then Transition).
type loggedDetail struct {
	set     bool
	sql     []SQLResult
	records []RecordOffset
}

// NoteDetailLogged records that the log now holds t's SQL results and Kafka records as t has
// them (txlog, after a write that stored both).
func (t *Transaction) NoteDetailLogged() {
	t.logged = loggedDetail{set: true, sql: t.SQL, records: t.records()}
}

// DetailLogged reports whether the log holds t's SQL results and Kafka records as t has them
// now: a write noted them (NoteDetailLogged) and t still has the very slices it wrote. A result
// or record list replaced since (an abort clears the results) is not the logged one, and is
// written again.
func (t *Transaction) DetailLogged() bool {
	return t.logged.set && sameSlice(t.logged.sql, t.SQL) && sameSlice(t.logged.records, t.records())
}

func (t *Transaction) records() []RecordOffset {
	if t.Kafka == nil {
		return nil
	}
	return t.Kafka.Records
}

// sameSlice reports whether a and b are the same slice: the same length over the same array.
func sameSlice[E any](a, b []E) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}
