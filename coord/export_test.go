package coord

// Test hooks for the shared Kafka transactions (batch_test.go).

// ShareAlways makes every request with records take the shared path, even alone.
func (c *Coordinator) ShareAlways() { c.batches.always = true }

// HoldBatchSlots takes every batch slot, so that requests gather into one open batch until
// the returned function gives the slots back.
func (c *Coordinator) HoldBatchSlots() (release func()) {
	for range cap(c.batches.slots) {
		c.batches.slots <- struct{}{}
	}
	return func() {
		for range cap(c.batches.slots) {
			<-c.batches.slots
		}
	}
}

// OpenBatchMembers is how many requests wait in the open batch.
func (c *Coordinator) OpenBatchMembers() int {
	c.batches.mu.Lock()
	defer c.batches.mu.Unlock()
	if c.batches.open == nil {
		return 0
	}
	return len(c.batches.open.members)
}
