# Install and export: find_package(kdp CONFIG) gives kdp::kdp.
include(CMakePackageConfigHelpers)
set(KDP_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/kdp)

install(TARGETS kdp kdp_kokkos EXPORT kdpTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# Headers of components this build leaves out are not installed (HDF5: the
# datasets on disk, checkpoints, run directories and the Trainer; without MPI
# dist/ stays: its communicator runs one process).
set(_kdp_left_out)
if(NOT KDP_ENABLE_HDF5)
  foreach(_h data/hdf5_dataset data/idx data/importer io/checkpoint io/checkpoint_directory
             io/file_lock io/hdf5_listing io/output_file io/run_config io/run_directory_error)
    list(APPEND _kdp_left_out REGEX "/kdp/${_h}\\.hpp$" EXCLUDE)
  endforeach()
  list(APPEND _kdp_left_out PATTERN "train" EXCLUDE)
endif()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/kdp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        ${_kdp_left_out})
install(DIRECTORY ${PROJECT_BINARY_DIR}/include/kdp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT kdpTargets NAMESPACE kdp:: DESTINATION ${KDP_INSTALL_CMAKEDIR})

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/kdpConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/kdpConfig.cmake
                              INSTALL_DESTINATION ${KDP_INSTALL_CMAKEDIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/kdpConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/kdpConfig.cmake ${PROJECT_BINARY_DIR}/kdpConfigVersion.cmake
        DESTINATION ${KDP_INSTALL_CMAKEDIR})
