package httpapi

import (
	"encoding/json"
	"net/http"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	"github.com/tritonbuild/tritonbuild/runtime/sharedmem"
)

// The shared-memory extension's endpoints (extension_shared_memory.md).
func (s *Server) routeSharedMemory(m *http.ServeMux) {
	m.HandleFunc("GET /v2/systemsharedmemory/status", s.shmStatus)
	m.HandleFunc("GET /v2/systemsharedmemory/region/{region}/status", s.shmStatus)
	m.HandleFunc("POST /v2/systemsharedmemory/region/{region}/register", s.shmRegister)
	m.HandleFunc("POST /v2/systemsharedmemory/unregister", s.shmUnregister)
	m.HandleFunc("POST /v2/systemsharedmemory/region/{region}/unregister", s.shmUnregister)
	m.HandleFunc("GET /v2/cudasharedmemory/status", s.cudaStatus)
	m.HandleFunc("GET /v2/cudasharedmemory/region/{region}/status", s.cudaStatus)
	m.HandleFunc("POST /v2/cudasharedmemory/region/{region}/register", s.cudaRegister)
	m.HandleFunc("POST /v2/cudasharedmemory/unregister", s.cudaUnregister)
	m.HandleFunc("POST /v2/cudasharedmemory/region/{region}/unregister", s.cudaUnregister)
}

func (s *Server) shmStatus(w http.ResponseWriter, r *http.Request) {
	st, err := s.opts.SharedMemory.Status(r.PathValue("region"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, st)
}

func (s *Server) shmRegister(w http.ResponseWriter, r *http.Request) {
	body, err := s.readAll(w, r, maxControlBody)
	if err != nil {
		writeError(w, err)
		return
	}
	var req struct {
		Key      *string `json:"key"`
		Offset   uint64  `json:"offset"`
		ByteSize *uint64 `json:"byte_size"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, backend.Errorf(backend.InvalidArg, "failed to parse the shared memory register request JSON: %v", err))
		return
	}
	switch {
	case req.Key == nil:
		writeError(w, backend.Errorf(backend.InvalidArg, "Shared memory register request has no 'key' field"))
	case req.ByteSize == nil:
		writeError(w, backend.Errorf(backend.InvalidArg, "Shared memory register request has no 'byte_size' field"))
	default:
		if err := s.opts.SharedMemory.Register(r.PathValue("region"), *req.Key, req.Offset, *req.ByteSize); err != nil {
			writeError(w, err)
			return
		}
		w.WriteHeader(http.StatusOK)
	}
}

func (s *Server) shmUnregister(w http.ResponseWriter, r *http.Request) {
	if err := s.opts.SharedMemory.Unregister(r.PathValue("region")); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// CUDA shared memory: a CPU-only server has no CUDA regions; it answers
// as Triton built without GPU support does, saying why.

func (s *Server) cudaStatus(w http.ResponseWriter, r *http.Request) {
	if name := r.PathValue("region"); name != "" {
		writeError(w, backend.Errorf(backend.NotFound, "Unable to find cuda shared memory region: '%s'", name))
		return
	}
	writeJSON(w, []struct{}{})
}

func (s *Server) cudaRegister(w http.ResponseWriter, r *http.Request) {
	writeError(w, sharedmem.CUDARegisterError(r.PathValue("region")))
}

func (s *Server) cudaUnregister(w http.ResponseWriter, _ *http.Request) {
	w.WriteHeader(http.StatusOK)
}
