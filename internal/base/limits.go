package base

// The size limits of the store, defined once. Every layer derives its own
// bound from these, so that whatever the API accepts can be written to the
// WAL, replayed, flushed to a segment, compacted and read back; and every
// decoder rejects (as corruption) what the API could never have written.
const (
	// MaxKeySize is the largest user key: 64 KiB.
	MaxKeySize = 64 << 10
	// MaxValueSize is the largest value: 32 MiB.
	MaxValueSize = 32 << 20
	// MaxEntrySize bounds len(key)+len(value) of one segment entry: the
	// largest key with the largest value.
	MaxEntrySize = MaxKeySize + MaxValueSize
	// MaxRecordSize is the largest WAL record payload: 256 MiB.
	MaxRecordSize = 256 << 20
	// MaxBatchSize is the largest encoded batch: one batch is one WAL
	// record.
	MaxBatchSize = MaxRecordSize
)
