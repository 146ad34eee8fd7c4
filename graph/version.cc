#include "dflow/version.h"

namespace dflow {

const char* LibraryVersion() { return DFLOW_VERSION_STRING; }

}  // namespace dflow
