package bloom_test

import (
	"fmt"

	"github.com/bloomkv/bloomkv/bloom"
)

func Example() {
	f := bloom.New(1000, 0.01) // 1000 keys, 1% false positives
	f.Add([]byte("apple"))
	f.Add([]byte("banana"))

	fmt.Println(f.Contains([]byte("apple")))  // always true: no false negatives
	fmt.Println(f.Contains([]byte("cherry"))) // false, or true with probability ~1%
	fmt.Printf("%s, %d bytes, k=%d\n", f.Geometry().Layout, f.SizeBytes(), f.Geometry().K)
	// Output:
	// true
	// false
	// blocked, 1280 bytes, k=7
}

// A store probing many filters for one key hashes the key once.
func Example_hashOnce() {
	segments := []*bloom.Filter{bloom.NewBitsPerKey(100, 10), bloom.NewBitsPerKey(5000, 10)}
	segments[1].Add([]byte("user:42"))

	h := bloom.Hash([]byte("user:42"))
	for i, f := range segments {
		if f.ContainsHash(h) {
			fmt.Println("read segment", i)
		}
	}
	// Output:
	// read segment 1
}

func ExampleFilter_Union() {
	g := bloom.GeometryFor(bloom.Blocked, 1000, 10)
	a, _ := bloom.NewGeometry(g)
	b, _ := bloom.NewGeometry(g)
	a.Add([]byte("apple"))
	b.Add([]byte("banana"))

	if err := a.Union(b); err != nil { // needs equal geometries
		panic(err)
	}
	fmt.Println(a.Contains([]byte("apple")), a.Contains([]byte("banana")), a.Count())
	// Output:
	// true true 2
}

func ExampleFilter_Fold() {
	// Build with the k of the size the filter will be folded to, so the
	// folded filter is as good as one built at that size.
	g := bloom.GeometryFor(bloom.Classic, 10_000, 20)
	g.K = bloom.OptimalK(bloom.Classic, 10)
	f, _ := bloom.NewGeometry(g)
	f.Add([]byte("apple"))

	fmt.Println("halvings:", g.Halvings())
	if err := f.Fold(); err != nil {
		panic(err)
	}
	fmt.Printf("%.1f → %.1f bits/key, still contains apple: %v\n",
		float64(g.Bits)/10_000, float64(f.Geometry().Bits)/10_000, f.Contains([]byte("apple")))
	// Output:
	// halvings: 6
	// 20.1 → 10.0 bits/key, still contains apple: true
}

func ExampleDecode() {
	f := bloom.NewBitsPerKey(100, 10)
	f.Add([]byte("apple"))
	data, _ := f.MarshalBinary() // what a segment file stores

	g, err := bloom.Decode(data) // no copy: g's bits live in data
	if err != nil {
		panic(err)
	}
	fmt.Println(len(data), g.Contains([]byte("apple")))

	data[len(data)-1] ^= 1 // damage the checksum
	_, err = bloom.Decode(data)
	fmt.Println(err != nil)
	// Output:
	// 164 true
	// true
}
