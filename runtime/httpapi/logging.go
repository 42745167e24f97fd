package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/logging"
)

// logSettingsJSON is Triton's $log_setting_response, members in its order.
type logSettingsJSON struct {
	File    string `json:"log_file"`
	Info    bool   `json:"log_info"`
	Warning bool   `json:"log_warning"`
	Error   bool   `json:"log_error"`
	Verbose uint32 `json:"log_verbose_level"`
	Format  string `json:"log_format"`
}

// logSettingNames maps the request's member names to setters. Triton's
// server reads log_warning and log_error while its protocol document names
// them log_warnings and log_errors; both are accepted.
var logSettingNames = map[string]func(u *logging.Update, raw json.RawMessage) error{
	"log_file":          func(u *logging.Update, raw json.RawMessage) error { return decodeSetting(raw, &u.File) },
	"log_info":          func(u *logging.Update, raw json.RawMessage) error { return decodeSetting(raw, &u.Info) },
	"log_warning":       func(u *logging.Update, raw json.RawMessage) error { return decodeSetting(raw, &u.Warning) },
	"log_warnings":      func(u *logging.Update, raw json.RawMessage) error { return decodeSetting(raw, &u.Warning) },
	"log_error":         func(u *logging.Update, raw json.RawMessage) error { return decodeSetting(raw, &u.Error) },
	"log_errors":        func(u *logging.Update, raw json.RawMessage) error { return decodeSetting(raw, &u.Error) },
	"log_verbose_level": func(u *logging.Update, raw json.RawMessage) error { return decodeSetting(raw, &u.Verbose) },
	"log_format":        func(u *logging.Update, raw json.RawMessage) error { return decodeSetting(raw, &u.Format) },
}

// decodeSetting decodes one member; null leaves the setting unchanged, as
// Triton treats it.
func decodeSetting[T any](raw json.RawMessage, dst **T) error {
	if string(bytes.TrimSpace(raw)) == "null" {
		return nil
	}
	v := new(T)
	if err := json.Unmarshal(raw, v); err != nil {
		return err
	}
	*dst = v
	return nil
}

// logging serves GET and POST /v2/logging (Triton's logging extension).
func (s *Server) logging(w http.ResponseWriter, r *http.Request) {
	l := s.opts.Logging
	if l == nil {
		writeError(w, backend.Errorf(backend.Unavailable, "the server does not support dynamic logging"))
		return
	}
	if r.Method == http.MethodPost {
		body, err := s.readAll(w, r, maxControlBody)
		if err != nil {
			writeError(w, err)
			return
		}
		var members map[string]json.RawMessage
		if err := json.Unmarshal(body, &members); err != nil {
			writeError(w, backend.Errorf(backend.InvalidArg, "failed to parse the log settings JSON: %v", err))
			return
		}
		var u logging.Update
		for name, raw := range members {
			set, ok := logSettingNames[name]
			if !ok {
				writeError(w, backend.Errorf(backend.InvalidArg, "unknown log setting '%s' (known: log_file, log_info, log_warning, log_error, log_verbose_level, log_format)", name))
				return
			}
			if err := set(&u, raw); err != nil {
				writeError(w, backend.Errorf(backend.InvalidArg, "log setting '%s' has a value of the wrong type: %v", name, err))
				return
			}
		}
		if _, err := l.Apply(u); err != nil {
			writeError(w, err)
			return
		}
	}
	st := l.Settings()
	writeJSON(w, logSettingsJSON{File: st.File, Info: st.Info, Warning: st.Warning, Error: st.Error, Verbose: st.Verbose, Format: st.Format})
}
