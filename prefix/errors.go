package prefix

import "errors"

// ErrInvalidBody is matched (errors.Is) by every error Key returns: the body
// cannot be keyed and the upstream would reject it too, so the proxy answers
// 400 without spending an upstream round trip.
var ErrInvalidBody = errors.New("invalid request body")

// Error is a malformed or ill-typed request body. Msg is written for the
// client: it names the offending field and never echoes body content.
type Error struct {
	Msg string
}

func (e *Error) Error() string { return e.Msg }

// Is makes errors.Is(err, ErrInvalidBody) true for every *Error.
func (e *Error) Is(target error) bool { return target == ErrInvalidBody }

// Client-facing messages. They are fixed strings so that building an error
// never formats attacker-controlled bytes.
var (
	errNotObject     = &Error{"request body must be a JSON object"}
	errSyntax        = &Error{"request body is not valid JSON"}
	errModelType     = &Error{`"model" must be a string`}
	errPromptMissing = &Error{`"prompt" is required`}
	errInputMissing  = &Error{`"input" is required`}
	errPromptType    = &Error{`"prompt"/"input" must be a string, an array of strings, an array of token ids or an array of token-id arrays`}
	errPromptEmpty   = &Error{`"prompt"/"input" must not be an empty array`}
	errTokenID       = &Error{`token ids must be integers between 0 and 4294967295`}
	errMsgsMissing   = &Error{`"messages" is required`}
	errMsgsType      = &Error{`"messages" must be an array`}
	errMsgsEmpty     = &Error{`"messages" must not be empty`}
	errMsgType       = &Error{`each message must be an object`}
	errRole          = &Error{`each message needs a string "role"`}
	errContent       = &Error{`message "content" must be a string, an array of content parts, or null`}
	errPart          = &Error{`each content part must be an object`}
	errPartText      = &Error{`a content part of type "text" needs a string "text"`}
	errTools         = &Error{`"tools" must be an array`}
)
