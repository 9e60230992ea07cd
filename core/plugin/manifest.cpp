#include "core/plugin/manifest.hpp"
