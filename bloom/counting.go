package bloom

import "fmt"

// Counting is a counting Bloom filter: every bit of a Filter becomes a 4-bit
// counter, so keys can be removed. A counter that reaches 15 saturates and
// is never decremented again (Fan et al.: with k ≤ (m/n)·ln 2 a 4-bit
// counter overflows with probability below 1.37e-15·m), which can only
// leave a key reported as present, never lose one.
//
// It uses exactly the probe positions of a Filter of the same geometry, so
// Filter() converts it to the plain filter of the keys currently held.
// A Counting takes 4× the memory of the Filter.
type Counting struct {
	g        Geometry
	counters []byte // two counters per byte: position i in byte i/2, low nibble for even i
	count    uint64
}

const counterMax = 15

// NewCounting returns an empty counting filter of geometry g.
func NewCounting(g Geometry) (*Counting, error) {
	if err := g.Validate(); err != nil {
		return nil, err
	}
	return &Counting{g: g, counters: make([]byte, g.Bits/2)}, nil
}

// Geometry returns the geometry shared with the equivalent Filter.
func (c *Counting) Geometry() Geometry { return c.g }

// Count returns the number of keys added minus those removed.
func (c *Counting) Count() uint64 { return c.count }

// Add inserts key.
func (c *Counting) Add(key []byte) { c.AddHash(HashSeed(key, c.g.Seed)) }

// Contains reports whether key may be present.
func (c *Counting) Contains(key []byte) bool { return c.ContainsHash(HashSeed(key, c.g.Seed)) }

// Remove deletes key and reports whether it could; see RemoveHash.
func (c *Counting) Remove(key []byte) bool { return c.RemoveHash(HashSeed(key, c.g.Seed)) }

// AddHash inserts the key whose hash is h.
func (c *Counting) AddHash(h uint64) {
	var buf [MaxK]uint64
	for _, p := range c.g.probes(h, buf[:0]) {
		if v := c.get(p); v < counterMax {
			c.set(p, v+1)
		}
	}
	c.count++
}

// ContainsHash reports whether the key whose hash is h may be present.
func (c *Counting) ContainsHash(h uint64) bool {
	var buf [MaxK]uint64
	for _, p := range c.g.probes(h, buf[:0]) {
		if c.get(p) == 0 {
			return false
		}
	}
	return true
}

// RemoveHash deletes one occurrence of the key whose hash is h. It must only
// be called for keys that were added: removing a key that was never added
// would decrement other keys' counters and could make them vanish. A key
// the filter says is absent cannot have been added, so that case is refused
// (false) and nothing changes.
func (c *Counting) RemoveHash(h uint64) bool {
	if !c.ContainsHash(h) {
		return false
	}
	var buf [MaxK]uint64
	for _, p := range c.g.probes(h, buf[:0]) {
		// v > 0 guards a key whose probes repeat a position and which was
		// never added (a false positive): harmless instead of wrapping.
		if v := c.get(p); v > 0 && v < counterMax {
			c.set(p, v-1)
		}
	}
	c.count--
	return true
}

// Filter returns the plain filter holding the keys currently present: a bit
// is set where its counter is non-zero.
func (c *Counting) Filter() *Filter {
	f := newFilter(c.g, make([]byte, c.g.Bits/8))
	for p := uint64(0); p < c.g.Bits; p++ {
		if c.get(p) != 0 {
			f.bits[p>>3] |= 1 << (p & 7)
		}
	}
	f.count = c.count
	return f
}

func (c *Counting) get(p uint64) byte {
	return c.counters[p>>1] >> (4 * (p & 1)) & 0xf
}

func (c *Counting) set(p uint64, v byte) {
	shift := 4 * (p & 1)
	c.counters[p>>1] = c.counters[p>>1]&^(0xf<<shift) | v<<shift
}

func (c *Counting) String() string {
	return fmt.Sprintf("bloom.Counting{%s, %d bits, k=%d, %d keys}", c.g.Layout, c.g.Bits, c.g.K, c.count)
}
