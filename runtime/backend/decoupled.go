package backend

// The decoupled transaction policy (model_transaction_policy { decoupled:
// true }) lets a model answer a request with any number of responses,
// zero included, sent whenever it likes, also after Execute returned.
//
// The contract between the scheduler and a backend for such a model:
//
//   - Every Request the scheduler hands to Execute carries a Sender
//     (Request.Sender is nil exactly when the model is not decoupled).
//   - The backend calls Sender.Send for each response, from any goroutine,
//     and marks the request's last call final (Triton's
//     TRITONSERVER_RESPONSE_COMPLETE_FINAL). A final call may carry no
//     response: the flag alone ends the request. A Response with Err set
//     is an error response; unless it is final, more may follow.
//   - Execute returns when the instance may take its next batch; requests
//     it has not finished stay open and the backend finishes them later.
//     Execute's responses are then ignored, except that a non-nil
//     response i is sent as request i's final response when the backend
//     has not finished it (a backend may answer some requests the
//     ordinary way). A non-nil error from Execute finishes every request
//     still open with that error.
//   - Send blocks while the client has not taken earlier responses (the
//     buffer per request is small), so a model cannot outrun a slow
//     client without bound. It returns an error, and the response is
//     dropped, once the request is finished or its client went away;
//     Cancelled tells the latter early, so a model can stop generating.
//   - Requests a backend never finishes are finished by the scheduler when
//     the model unloads, or when the client goes away.

// Sender delivers the responses of one request of a decoupled model. Its
// methods are safe for concurrent use.
type Sender interface {
	// Send delivers resp (nil only with final) and, when final is true,
	// finishes the request.
	Send(resp *Response, final bool) error
	// Cancelled reports whether the request's client went away or the
	// request was otherwise ended by the server: further Sends fail.
	Cancelled() bool
}

// DecoupledSupporter is implemented by backends that honour the contract
// above. A model with the decoupled transaction policy loads only on a
// backend whose SupportsDecoupled returns true; others (pytorch) refuse
// it at load rather than answering its requests the ordinary way.
type DecoupledSupporter interface {
	SupportsDecoupled() bool
}
