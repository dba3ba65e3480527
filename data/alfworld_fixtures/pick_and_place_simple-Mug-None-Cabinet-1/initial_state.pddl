;; TEMPO fixture: a small hand-written ALFWorld problem (one dining room, three receptacles).
;; Task: put a mug in cabinet (pick_and_place_simple).
(define (problem tempo_fixture_mug_cabinet)
    (:domain alfred)
    (:objects
        agent1 - agent
        MugType - otype
        PlateType - otype
        BookType - otype
        KnifeType - otype
        ButterKnifeType - otype
        DiningTableType - rtype
        CabinetType - rtype
        ShelfType - rtype
        SinkBasinType - rtype
        MicrowaveType - rtype
        FridgeType - rtype
        Mug_bar__plus_00_dot_40_bar__plus_00_dot_80_bar__minus_02_dot_10 - object
        Plate_bar__minus_02_dot_30_bar__plus_00_dot_40_bar__plus_01_dot_10 - object
        Book_bar__plus_01_dot_90_bar__plus_01_dot_20_bar__plus_00_dot_60 - object
        DiningTable_bar__plus_00_dot_50_bar__plus_00_dot_00_bar__minus_02_dot_00 - receptacle
        Cabinet_bar__minus_02_dot_40_bar__plus_00_dot_40_bar__plus_01_dot_00 - receptacle
        Shelf_bar__plus_02_dot_00_bar__plus_01_dot_10_bar__plus_00_dot_50 - receptacle
        loc_bar_0_bar_0_bar_2_bar_30 - location
        loc_bar_2_bar__minus_6_bar_2_bar_45 - location
        loc_bar__minus_8_bar_4_bar_3_bar_30 - location
        loc_bar_7_bar_2_bar_1_bar_0 - location
    )
    (:init
        (atLocation agent1 loc_bar_0_bar_0_bar_2_bar_30)
        (receptacleAtLocation DiningTable_bar__plus_00_dot_50_bar__plus_00_dot_00_bar__minus_02_dot_00 loc_bar_2_bar__minus_6_bar_2_bar_45)
        (receptacleAtLocation Cabinet_bar__minus_02_dot_40_bar__plus_00_dot_40_bar__plus_01_dot_00 loc_bar__minus_8_bar_4_bar_3_bar_30)
        (receptacleAtLocation Shelf_bar__plus_02_dot_00_bar__plus_01_dot_10_bar__plus_00_dot_50 loc_bar_7_bar_2_bar_1_bar_0)
        (receptacleType DiningTable_bar__plus_00_dot_50_bar__plus_00_dot_00_bar__minus_02_dot_00 DiningTableType)
        (receptacleType Cabinet_bar__minus_02_dot_40_bar__plus_00_dot_40_bar__plus_01_dot_00 CabinetType)
        (receptacleType Shelf_bar__plus_02_dot_00_bar__plus_01_dot_10_bar__plus_00_dot_50 ShelfType)
        (openable Cabinet_bar__minus_02_dot_40_bar__plus_00_dot_40_bar__plus_01_dot_00)
        (objectType Mug_bar__plus_00_dot_40_bar__plus_00_dot_80_bar__minus_02_dot_10 MugType)
        (objectType Plate_bar__minus_02_dot_30_bar__plus_00_dot_40_bar__plus_01_dot_10 PlateType)
        (objectType Book_bar__plus_01_dot_90_bar__plus_01_dot_20_bar__plus_00_dot_60 BookType)
        (objectAtLocation Mug_bar__plus_00_dot_40_bar__plus_00_dot_80_bar__minus_02_dot_10 loc_bar_2_bar__minus_6_bar_2_bar_45)
        (objectAtLocation Plate_bar__minus_02_dot_30_bar__plus_00_dot_40_bar__plus_01_dot_10 loc_bar__minus_8_bar_4_bar_3_bar_30)
        (objectAtLocation Book_bar__plus_01_dot_90_bar__plus_01_dot_20_bar__plus_00_dot_60 loc_bar_7_bar_2_bar_1_bar_0)
        (inReceptacle Mug_bar__plus_00_dot_40_bar__plus_00_dot_80_bar__minus_02_dot_10 DiningTable_bar__plus_00_dot_50_bar__plus_00_dot_00_bar__minus_02_dot_00)
        (inReceptacle Plate_bar__minus_02_dot_30_bar__plus_00_dot_40_bar__plus_01_dot_10 Cabinet_bar__minus_02_dot_40_bar__plus_00_dot_40_bar__plus_01_dot_00)
        (inReceptacle Book_bar__plus_01_dot_90_bar__plus_01_dot_20_bar__plus_00_dot_60 Shelf_bar__plus_02_dot_00_bar__plus_01_dot_10_bar__plus_00_dot_50)
        (pickupable Mug_bar__plus_00_dot_40_bar__plus_00_dot_80_bar__minus_02_dot_10)
        (pickupable Plate_bar__minus_02_dot_30_bar__plus_00_dot_40_bar__plus_01_dot_10)
        (pickupable Book_bar__plus_01_dot_90_bar__plus_01_dot_20_bar__plus_00_dot_60)
        (cleanable Mug_bar__plus_00_dot_40_bar__plus_00_dot_80_bar__minus_02_dot_10)
        (cleanable Plate_bar__minus_02_dot_30_bar__plus_00_dot_40_bar__plus_01_dot_10)
        (canContain DiningTableType MugType)
        (canContain DiningTableType PlateType)
        (canContain DiningTableType BookType)
        (canContain CabinetType MugType)
        (canContain CabinetType PlateType)
        (canContain CabinetType BookType)
        (canContain ShelfType MugType)
        (canContain ShelfType PlateType)
        (canContain ShelfType BookType)
    )
    (:goal
        (and
            (exists (?r - receptacle)
                (exists (?o - object)
                    (and
                        (inReceptacle ?o ?r)
                        (objectType ?o MugType)
                        (receptacleType ?r CabinetType)
                    )
                )
            )
        )
    )
)
