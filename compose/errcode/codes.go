// Package errcode holds every error code Compose documents, one constant per code
// (those of iii's Compose plus the 0.26 codes), and the coded error type that carries them.
// Callers match on the code; the message wording may change.
package errcode

import "github.com/iii-go/iii/internal/base/errcode"

// Compose file and CLI.
const (
	// InvalidComposeFile: the YAML does not parse or does not match the schema.
	InvalidComposeFile = "INVALID_COMPOSE_FILE"
	// ComposeFileUnreadable: a relative file= was not found from the daemon's directory.
	ComposeFileUnreadable = "COMPOSE_FILE_UNREADABLE"
	// NoComposeFile: no file was named and the daemon's directory has none.
	NoComposeFile = "NO_COMPOSE_FILE"
	// ComposeFileTooLarge: the compose file is larger than the most Compose reads.
	ComposeFileTooLarge = "COMPOSE_FILE_TOO_LARGE"
	// IOError: any other read or write failure.
	IOError = "IO_ERROR"
	// EmptyContainers: no containers and no engine mapping.
	EmptyContainers = "EMPTY_CONTAINERS"
	// InvalidDuration: a duration not of the form 500ms, 30s or 2m.
	InvalidDuration = "INVALID_DURATION"
	// UnknownDependency: start_after names a container that does not exist.
	UnknownDependency = "UNKNOWN_DEPENDENCY"
	// SelfDependency: a container lists itself in start_after.
	SelfDependency = "SELF_DEPENDENCY"
	// DependencyCycle: start_after forms a cycle.
	DependencyCycle = "DEPENDENCY_CYCLE"
	// UnsupportedWorkerSource: a worker value that is neither path:// nor package://.
	UnsupportedWorkerSource = "UNSUPPORTED_WORKER_SOURCE"
	// UndefinedVariable: ${VAR} with VAR unset and no default.
	UndefinedVariable = "UNDEFINED_VARIABLE"
	// InvalidReference: a malformed ${...} reference.
	InvalidReference = "INVALID_REFERENCE"
	// UnterminatedReference: ${ without its closing brace.
	UnterminatedReference = "UNTERMINATED_REFERENCE"
	// FileRequiresUp: -f/--file given without --up.
	FileRequiresUp = "FILE_REQUIRES_UP"
	// FrozenRequiresUp: --frozen given without --up.
	FrozenRequiresUp = "FROZEN_REQUIRES_UP"
	// BuildConflictsWithServeOptions: build combined with --engine, --namespace or --up.
	BuildConflictsWithServeOptions = "BUILD_CONFLICTS_WITH_SERVE_OPTIONS"
	// InvalidNamespace: a namespace outside [a-z0-9_-], or empty; the engine's code, declared
	// there.
	InvalidNamespace = errcode.InvalidNamespace
	// UsageError: an unknown flag or argument on the command line.
	UsageError = "USAGE_ERROR"
)

// Worker declaration.
const (
	// MissingVersionForPackage: a package:// container without version.
	MissingVersionForPackage = "MISSING_VERSION_FOR_PACKAGE"
	// RunNotAllowedForPackage: scripts.run on a package:// container.
	RunNotAllowedForPackage = "RUN_NOT_ALLOWED_FOR_PACKAGE"
	// PreRunTimeoutWithoutPreRun: scripts.pre_run_timeout without scripts.pre_run.
	PreRunTimeoutWithoutPreRun = "PRE_RUN_TIMEOUT_WITHOUT_PRE_RUN"
	// ReservedEnvOverride: environment sets an III_* variable owned by Compose.
	ReservedEnvOverride = "RESERVED_ENV_OVERRIDE"
	// RetiredConfigEnv: environment sets a retired configuration variable.
	RetiredConfigEnv = "RETIRED_CONFIG_ENV"
	// MissingEnvFile: an env_file entry does not exist.
	MissingEnvFile = "MISSING_ENV_FILE"
	// MissingWorkerDirectory: a path:// worker's directory does not exist.
	MissingWorkerDirectory = "MISSING_WORKER_DIRECTORY"
	// MissingStartCommand: a path:// worker with neither scripts.run nor a manifest start.
	MissingStartCommand = "MISSING_START_COMMAND"
	// InvalidManifest: a path:// worker's iii.worker.yaml does not parse.
	InvalidManifest = "INVALID_MANIFEST"
	// NotAPackageContainer: update on a path:// container.
	NotAPackageContainer = "NOT_A_PACKAGE_CONTAINER"
	// InvalidWorkerSpec: a worker= value that cannot be parsed.
	InvalidWorkerSpec = "INVALID_WORKER_SPEC"
	// WorkerSourceChanged: add would turn a package:// container into path:// or back.
	WorkerSourceChanged = "WORKER_SOURCE_CHANGED"
	// EngineWorkerIsBuiltin: an engine-kind package given as an add root or a container.
	EngineWorkerIsBuiltin = "ENGINE_WORKER_IS_BUILTIN"
	// UnknownContainer: a container that does not exist was named.
	UnknownContainer = "UNKNOWN_CONTAINER"
	// StopTakesNoContainer: compose::stop was given a container.
	StopTakesNoContainer = "STOP_TAKES_NO_CONTAINER"
)

// Packages and lock.
const (
	// RegistryUnreachable: the registry could not be reached.
	RegistryUnreachable = "REGISTRY_UNREACHABLE"
	// PackageNotResolved: no version satisfies the selector, or the registry refused the lookup.
	PackageNotResolved = "PACKAGE_NOT_RESOLVED"
	// RegistryNameRefused: a package name or version that is not safe as a path.
	RegistryNameRefused = "REGISTRY_NAME_REFUSED"
	// UnsupportedPackageKind: a package type Compose cannot install (engine, image, unknown).
	UnsupportedPackageKind = "UNSUPPORTED_PACKAGE_KIND"
	// UnsupportedPlatform: a binary package (or the sandbox adapter) has no build for the host;
	// the engine's code, declared there.
	UnsupportedPlatform = errcode.UnsupportedPlatform
	// BundleNeedsAVM: a bundle worker on a host without VMs (Windows), refused before download.
	BundleNeedsAVM = "BUNDLE_NEEDS_A_VM"
	// PackageNotInstalled: a package expected in the cache is missing.
	PackageNotInstalled = "PACKAGE_NOT_INSTALLED"
	// PackageDownloadFailed: an artifact could not be fetched or unpacked.
	PackageDownloadFailed = "PACKAGE_DOWNLOAD_FAILED"
	// PackageDigestMismatch: a downloaded artifact does not match its SHA-256.
	PackageDigestMismatch = "PACKAGE_DIGEST_MISMATCH"
	// PackageArtifactEmpty: a downloaded artifact holds nothing.
	PackageArtifactEmpty = "PACKAGE_ARTIFACT_EMPTY"
	// ArtifactURLRefused: an artifact URL outside the registry's own scheme and host (or, for a
	// file:// registry, outside its directory), or a file that is not a regular file.
	ArtifactURLRefused = "ARTIFACT_URL_REFUSED"
	// PackageSizeMismatch: a downloaded artifact's length differs from the size its index gives.
	PackageSizeMismatch = "PACKAGE_SIZE_MISMATCH"
	// PackageTooLarge: an artifact, or what it unpacks to, exceeds the package cache's caps.
	PackageTooLarge = "PACKAGE_TOO_LARGE"
	// PackageExecutableMissing: a binary package whose archive holds no executable named after it.
	PackageExecutableMissing = "PACKAGE_EXECUTABLE_MISSING"
	// InvalidComposeLock: the lock file does not parse or does not validate.
	InvalidComposeLock = "INVALID_COMPOSE_LOCK"
	// ComposeLockRequired: --frozen and the lock file does not exist.
	ComposeLockRequired = "COMPOSE_LOCK_REQUIRED"
	// ComposeLockOutOfDate: --frozen and the lock does not match the compose file.
	ComposeLockOutOfDate = "COMPOSE_LOCK_OUT_OF_DATE"
	// ComposeMutationRollbackFailed: a failed lock update could not restore the compose file.
	ComposeMutationRollbackFailed = "COMPOSE_MUTATION_ROLLBACK_FAILED"
	// AddPlanStale: the compose file changed while compose::add planned its edit.
	AddPlanStale = "ADD_PLAN_STALE"
)

// Configuration.
const (
	// ConfigFetchFailed: the container's stored configuration could not be read.
	ConfigFetchFailed = "CONFIG_FETCH_FAILED"
	// ConfigPublishFailed: the merged configuration could not be published.
	ConfigPublishFailed = "CONFIG_PUBLISH_FAILED"
	// InvalidConfigName: config_name outside [a-z0-9_-]{1,64}.
	InvalidConfigName = "INVALID_CONFIG_NAME"
	// ConfigNameCollision: two containers resolve to the same configuration id.
	ConfigNameCollision = "CONFIG_NAME_COLLISION"
	// ConfigMigrationFailed: a configuration id migration failed.
	ConfigMigrationFailed = "CONFIG_MIGRATION_FAILED"
)

// Start and readiness.
const (
	// SpawnFailed: the OS could not start the worker process.
	SpawnFailed = "SPAWN_FAILED"
	// HookSpawnFailed: pre_run or post_run could not be started.
	HookSpawnFailed = "HOOK_SPAWN_FAILED"
	// HookFailed: pre_run or post_run exited non-zero.
	HookFailed = "HOOK_FAILED"
	// HookTimeout: pre_run or post_run ran past its timeout.
	HookTimeout = "HOOK_TIMEOUT"
	// StartupTimeout: the worker did not register within startup_timeout.
	StartupTimeout = "STARTUP_TIMEOUT"
	// ChildExitedBeforeRegistration: the worker exited before it registered.
	ChildExitedBeforeRegistration = "CHILD_EXITED_BEFORE_REGISTRATION"
	// WorkerIgnoredNamespace: the worker registered outside III_NAMESPACE.
	WorkerIgnoredNamespace = "WORKER_IGNORED_NAMESPACE"
	// WorkerNameMismatch: the worker named itself instead of using III_WORKER_NAME.
	WorkerNameMismatch = "WORKER_NAME_MISMATCH"
	// FunctionsInWrongNamespace: the worker registered functions in another namespace.
	FunctionsInWrongNamespace = "FUNCTIONS_IN_WRONG_NAMESPACE"
	// ContainerNameTaken: another live worker holds the (namespace, key).
	ContainerNameTaken = "CONTAINER_NAME_TAKEN"
	// EngineCallFailed: a call to the engine failed.
	EngineCallFailed = "ENGINE_CALL_FAILED"
	// ProjectDidNotStart: the final error of a failed --up.
	ProjectDidNotStart = "PROJECT_DID_NOT_START"
	// OperationCancelled: a mutation was cancelled.
	OperationCancelled = "OPERATION_CANCELLED"
	// OperationIDAlreadyExists: a caller-chosen operation id was reused.
	OperationIDAlreadyExists = "OPERATION_ID_ALREADY_EXISTS"
)

// Managed engine.
const (
	// EngineSectionRequiresManagedStart: an external daemon was asked to load a managed file.
	EngineSectionRequiresManagedStart = "ENGINE_SECTION_REQUIRES_MANAGED_START"
	// EngineAlreadyOwned: a second file in the daemon also declares engine:.
	EngineAlreadyOwned = "ENGINE_ALREADY_OWNED"
	// EngineRestartRequired: engine: changed while the daemon runs.
	EngineRestartRequired = "ENGINE_RESTART_REQUIRED"
	// EngineWorkerIsInjected: engine.workers declares a worker the engine injects itself.
	EngineWorkerIsInjected = "ENGINE_WORKER_IS_INJECTED"
	// UnsupportedEngineWorker: engine.workers declares a worker the engine does not own.
	UnsupportedEngineWorker = "UNSUPPORTED_ENGINE_WORKER"
	// InvalidEngineWorkerConfig: an engine.workers value that is not a mapping.
	InvalidEngineWorkerConfig = "INVALID_ENGINE_WORKER_CONFIG"
	// ConfigUnsupported: an engine.workers setting of iii's the engine does not implement
	// (iii-stream's redis and bridge adapters), refused before anything starts; the engine's own
	// code for the same refusal in config.yaml, declared there.
	ConfigUnsupported = errcode.ConfigUnsupported
	// InvalidManagedEngineURL: engine.url is blank or not a ws:// or wss:// URL.
	InvalidManagedEngineURL = "INVALID_MANAGED_ENGINE_URL"
	// ManagedEngineEndpointMismatch: engine.url and the worker-manager listener disagree.
	ManagedEngineEndpointMismatch = "MANAGED_ENGINE_ENDPOINT_MISMATCH"
	// ManagedEngineListenerUnavailable: the managed engine's port is taken.
	ManagedEngineListenerUnavailable = "MANAGED_ENGINE_LISTENER_UNAVAILABLE"
	// EngineSpawnFailed: the managed engine could not be started.
	EngineSpawnFailed = "ENGINE_SPAWN_FAILED"
	// EngineStartupTimeout: the managed engine did not listen in time.
	EngineStartupTimeout = "ENGINE_STARTUP_TIMEOUT"
	// EngineExited: the managed engine exited.
	EngineExited = "ENGINE_EXITED"
	// EngineURLConflictsWithManaged: --engine given for a file whose engine: is a mapping.
	EngineURLConflictsWithManaged = "ENGINE_URL_CONFLICTS_WITH_MANAGED"
)

// Daemon and project.
const (
	// WrongDaemon: the payload's namespace guard differs from the daemon's namespace.
	WrongDaemon = "WRONG_DAEMON"
	// UnknownProject: no loaded project has that file.
	UnknownProject = "UNKNOWN_PROJECT"
	// InvalidStateFile: state.json is corrupt.
	InvalidStateFile = "INVALID_STATE_FILE"
	// StateDirUnavailable: no home directory and no III_COMPOSE_STATE_DIR.
	StateDirUnavailable = "STATE_DIR_UNAVAILABLE"
	// DaemonAlreadyServing: another daemon serves this namespace on the engine.
	DaemonAlreadyServing = "DAEMON_ALREADY_SERVING"
	// DaemonNamespaceTaken: the same project and namespace is already run by another Compose.
	DaemonNamespaceTaken = "DAEMON_NAMESPACE_TAKEN"
	// DaemonNotAvailable: this build checks the project but cannot run it yet.
	DaemonNotAvailable = "DAEMON_NOT_AVAILABLE"
)

// New in 0.26.
const (
	// SandboxConfigMoved: engine.workers.iii-sandbox is still declared; the message prints the
	// replacement YAML.
	SandboxConfigMoved = "SANDBOX_CONFIG_MOVED"
	// SandboxAdapterNotDeclared: under --frozen, the project needs the sandbox adapter but its
	// compose file does not declare it.
	SandboxAdapterNotDeclared = "SANDBOX_ADAPTER_NOT_DECLARED"
)

// Requests, logs and operations.
const (
	// InvalidRequest: a compose::* payload field holds a value the function does not take.
	InvalidRequest = "INVALID_REQUEST"
	// UnknownOperation: compose::operation or compose::cancel named an operation id the
	// daemon does not know.
	UnknownOperation = "UNKNOWN_OPERATION"
	// UnknownFunction: compose::schema was asked for a function the daemon does not serve.
	UnknownFunction = "UNKNOWN_FUNCTION"
)
