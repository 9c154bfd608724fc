// The stub engine and routers of the real-node e2e tests, and their image packer (README.md).
// Standard library only: nothing to download, so it builds offline and in seconds.
module modeldeployment.local/e2e/stub

go 1.24
