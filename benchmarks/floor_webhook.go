// A mutating webhook that answers every review at once and changes nothing: the floor, in Go.
//
// bench_scale.py --floor go builds it (the standard library only) and runs the scale-up with it
// in the gatekeeper's place, beside floor_webhook.py (the same in Python, on aiohttp): the
// difference between the two is what the server's language and HTTP stack cost (Go's server
// speaks HTTP/2 to the API server; aiohttp speaks HTTP/1.1).
//
// Usage: floor-webhook PORT CERT KEY   (serves /mutate until killed)
package main

import (
	"encoding/json"
	"net/http"
	"os"
)

type review struct {
	Request struct {
		UID string `json:"uid"`
	} `json:"request"`
}

func main() {
	http.HandleFunc("/mutate", func(w http.ResponseWriter, r *http.Request) {
		var in review
		_ = json.NewDecoder(r.Body).Decode(&in)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"apiVersion": "admission.k8s.io/v1",
			"kind":       "AdmissionReview",
			"response":   map[string]any{"uid": in.Request.UID, "allowed": true},
		})
	})
	if err := http.ListenAndServeTLS("127.0.0.1:"+os.Args[1], os.Args[2], os.Args[3], nil); err != nil {
		panic(err)
	}
}
