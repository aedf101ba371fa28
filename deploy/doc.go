// Package deploy holds no code that ships: its tests check what does, the
// Kubernetes manifests under kubernetes/, the repository's Dockerfile and
// the Grafana dashboard under grafana/, against the prefixring binary
// built from the parent module. It is a module of its own so that the
// router's module does not depend on Kubernetes' libraries.
package deploy
