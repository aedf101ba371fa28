// Package workload defines the request streams every measure of prefixring
// replays: the fleet simulator's studies (`prefixring eval`), the real-time
// load generator (`prefixring load`) and the demo take their traffic from
// here (the chaos scenarios generate their own chats, in chaos/load.go), so a number measured in virtual time and
// one measured against real servers come from the same requests.
//
// A workload is a list of [Session]s: a single request, a conversation, or
// an agent's tool loop. A session's first turn arrives at its Start (open
// loop); each later turn follows the answer to the previous one after a
// think time (closed loop) and carries the whole history, previous answers
// included ([Session.Call]). Generators: [SharedPrefix] (SGLang's generated
// shared-prefix benchmark), [MultiTurn] (chat or completions), [Agentic]
// (tool loops over a long tool preamble) and trace replay
// ([TraceSessions], the Mooncake format); [Named] builds each by name with
// its defaults. Text is deterministic pseudo-words ([Words]) whose length in
// the simulated engine's stand-in tokens is exact.
//
// [Request] and [SharedPrefixTokens] are the token-level form the fleet
// simulator consumes directly.
package workload
