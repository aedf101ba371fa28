package prefix_test

import (
	"fmt"

	"github.com/prefixring/prefixring/prefix"
)

// Turn 2 of a conversation keys like turn 1, and a different conversation
// under the same system prompt keys differently.
func Example() {
	k, err := prefix.New(prefix.DefaultConfig())
	if err != nil {
		panic(err)
	}
	turn1 := `{"model":"llama","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Plan a trip to Lyon"}]}`
	turn2 := `{"model":"llama","stream":true,"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Plan a trip to Lyon"},{"role":"assistant","content":"Day 1: ..."},{"role":"user","content":"Make it 3 days"}]}`
	other := `{"model":"llama","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Plan a trip to Oslo"}]}`
	route := prefix.RouteOf("/v1/chat/completions")
	k1, _, _ := k.Key(route, []byte(turn1))
	k2, _, _ := k.Key(route, []byte(turn2))
	k3, _, _ := k.Key(route, []byte(other))
	fmt.Println("turn 2 keys like turn 1:", k1 == k2)
	fmt.Println("other conversation differs:", k1 != k3)

	_, _, err = k.Key(route, []byte(`{"model":"llama","messages":"hi"}`))
	fmt.Println(err)
	// Output:
	// turn 2 keys like turn 1: true
	// other conversation differs: true
	// "messages" must be an array
}
