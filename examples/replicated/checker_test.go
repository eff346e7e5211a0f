//go:build !windows

package main

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// TestRegisterModel: the checker TestJepsen relies on rejects hand-made
// histories that no linearizable store produces (a stale read, a lost
// write, a value read back after it was seen overwritten, a value crossing
// keys), and accepts ones a correct store may produce, writes of unknown
// outcome included (returned at the end of the history, as TestJepsen
// does).
func TestRegisterModel(t *testing.T) {
	const end = 1000
	put := func(c int, key, v string, call, ret int64) porcupine.Operation {
		return porcupine.Operation{ClientId: c, Input: regInput{Op: "put", Key: key, Value: v}, Call: call, Output: regOutput{}, Return: ret}
	}
	unknown := func(c int, key, v string, call int64) porcupine.Operation {
		return porcupine.Operation{ClientId: c, Input: regInput{Op: "put", Key: key, Value: v}, Call: call, Output: regOutput{Unknown: true}, Return: end}
	}
	del := func(c int, key string, call, ret int64) porcupine.Operation {
		return porcupine.Operation{ClientId: c, Input: regInput{Op: "delete", Key: key}, Call: call, Output: regOutput{}, Return: ret}
	}
	get := func(c int, key, v string, call, ret int64) porcupine.Operation {
		return porcupine.Operation{ClientId: c, Input: regInput{Op: "get", Key: key}, Call: call, Output: regOutput{Value: v}, Return: ret}
	}
	for _, tc := range []struct {
		name string
		want porcupine.CheckResult
		ops  []porcupine.Operation
	}{
		{"stale read", porcupine.Illegal, []porcupine.Operation{
			put(0, "k", "a", 0, 10), put(0, "k", "b", 20, 30), get(1, "k", "a", 40, 50)}},
		{"lost write", porcupine.Illegal, []porcupine.Operation{
			put(0, "k", "a", 0, 10), get(1, "k", "", 20, 30)}},
		{"read goes back", porcupine.Illegal, []porcupine.Operation{
			put(0, "k", "a", 0, 10), put(0, "k", "b", 20, 100), get(1, "k", "b", 30, 40), get(2, "k", "a", 50, 60)}},
		{"deleted value read", porcupine.Illegal, []porcupine.Operation{
			put(0, "k", "a", 0, 10), del(0, "k", 20, 30), get(1, "k", "a", 40, 50)}},
		{"value of another key", porcupine.Illegal, []porcupine.Operation{
			put(0, "k1", "a", 0, 10), get(1, "k2", "a", 20, 30)}},
		{"unknown write seen, then unseen", porcupine.Illegal, []porcupine.Operation{
			unknown(0, "k", "a", 0), get(1, "k", "a", 20, 30), get(1, "k", "", 40, 50)}},
		{"concurrent write, either value", porcupine.Ok, []porcupine.Operation{
			put(0, "k", "a", 0, 10), put(0, "k", "b", 20, 60), get(1, "k", "a", 30, 40), get(2, "k", "b", 50, 70)}},
		{"unknown write never applied", porcupine.Ok, []porcupine.Operation{
			put(0, "k", "a", 0, 10), unknown(1, "k", "b", 20), get(2, "k", "a", 30, 40)}},
		{"unknown write applied late", porcupine.Ok, []porcupine.Operation{
			unknown(0, "k", "a", 0), get(1, "k", "", 20, 30), get(1, "k", "a", 40, 50)}},
	} {
		if got := porcupine.CheckOperationsTimeout(registerModel, tc.ops, 10*time.Second); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}
